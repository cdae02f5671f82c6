-- Schema version 3: the cost of a tool call (servers.<name>.tools.costs).
ALTER TABLE tool_calls ADD COLUMN cost REAL NOT NULL DEFAULT 0;
