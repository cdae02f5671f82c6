-- Schema version 2: the guardrail that blocked a tool call (SPEC S21).
ALTER TABLE tool_calls ADD COLUMN guardrail TEXT NOT NULL DEFAULT '';
