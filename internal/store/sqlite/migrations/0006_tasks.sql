-- Schema version 6: gateway-run MCP tasks (issue 26), so that a task's
-- status and result outlive the replica that ran its call. id is the
-- task's nonce (never the sealed id), owner a fingerprint (never a
-- credential); result and error are written the moment the call ends.
CREATE TABLE tasks (
	id              TEXT    NOT NULL PRIMARY KEY,
	owner           TEXT    NOT NULL,
	route           TEXT    NOT NULL,
	server          TEXT    NOT NULL,
	status          TEXT    NOT NULL,
	status_message  TEXT    NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	ttl_ms          INTEGER NOT NULL,
	replica         TEXT    NOT NULL DEFAULT '',
	result          TEXT    NOT NULL DEFAULT '',
	error           TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX tasks_owner ON tasks (owner, created_at, id);
CREATE INDEX tasks_expires ON tasks (expires_at);
