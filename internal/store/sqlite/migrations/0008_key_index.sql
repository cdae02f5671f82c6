-- Schema version 8: tool_calls_key indexes only the calls made with a
-- key. A gateway without keys records every call with key_alias '', and
-- kept a third index entry per call that no query reads: a filter by key
-- names a key (store.SQLAudit adds key_alias <> '', the index's own
-- condition, to it, so the planner can use this index).
DROP INDEX tool_calls_key;
CREATE INDEX tool_calls_key ON tool_calls (key_alias, ts, id) WHERE key_alias <> '';
