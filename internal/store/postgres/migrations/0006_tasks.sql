-- Schema version 6: gateway-run MCP tasks (issue 26), so that a task's
-- status and result outlive the replica that ran its call. id is the
-- task's nonce (never the sealed id), owner a fingerprint (never a
-- credential); result and error are written the moment the call ends.
CREATE TABLE tasks (
	id              text        COLLATE "C" NOT NULL PRIMARY KEY,
	owner           text        COLLATE "C" NOT NULL,
	route           text        NOT NULL,
	server          text        NOT NULL,
	status          text        NOT NULL,
	status_message  text        NOT NULL DEFAULT '',
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	expires_at      timestamptz NOT NULL,
	ttl_ms          bigint      NOT NULL,
	replica         text        NOT NULL DEFAULT '',
	result          text        NOT NULL DEFAULT '',
	error           text        NOT NULL DEFAULT ''
);
CREATE INDEX tasks_owner ON tasks (owner, created_at, id);
CREATE INDEX tasks_expires ON tasks (expires_at);
