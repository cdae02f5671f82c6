-- Schema version 1. Times are unix milliseconds (UTC); lists and maps are
-- JSON text. Never edit a released migration: add the next file instead.

CREATE TABLE keys (
	id             TEXT    NOT NULL PRIMARY KEY,
	alias          TEXT    NOT NULL UNIQUE,
	key_hash       TEXT    NOT NULL UNIQUE, -- sha256 hex of the secret; the lookup index
	key_prefix     TEXT    NOT NULL DEFAULT '',
	user_id        TEXT    NOT NULL DEFAULT '',
	team_id        TEXT    NOT NULL DEFAULT '',
	servers        TEXT,                    -- JSON array; NULL = all servers
	tools          TEXT    NOT NULL DEFAULT '{}',
	deny_tools     TEXT    NOT NULL DEFAULT '{}',
	toolsets       TEXT    NOT NULL DEFAULT '[]',
	access_groups  TEXT    NOT NULL DEFAULT '[]',
	allowed_cidrs  TEXT    NOT NULL DEFAULT '[]',
	rate_limit_rpm INTEGER NOT NULL DEFAULT 0,
	expires_at     INTEGER,                 -- NULL = never
	admin          INTEGER NOT NULL DEFAULT 0,
	no_mcp         INTEGER NOT NULL DEFAULT 0,
	disabled       INTEGER NOT NULL DEFAULT 0,
	source         TEXT    NOT NULL CHECK (source IN ('config', 'api')),
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL,
	last_used_at   INTEGER                  -- NULL = never used
) STRICT;

CREATE TABLE users (
	id         TEXT    NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE teams (
	id         TEXT    NOT NULL PRIMARY KEY,
	name       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE objects (
	kind       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	doc        TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (kind, name)
) STRICT;

CREATE TABLE terminated_sessions (
	id_hash    TEXT    NOT NULL PRIMARY KEY, -- sha256 hex of the session id
	expires_at INTEGER NOT NULL
) STRICT;
CREATE INDEX terminated_sessions_expires ON terminated_sessions (expires_at);

-- AUTOINCREMENT: ids are never reused, even after old rows are purged, so a
-- cursor can never point at a different record.
CREATE TABLE audit_log (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	ts     INTEGER NOT NULL,
	actor  TEXT    NOT NULL,
	action TEXT    NOT NULL,
	target TEXT    NOT NULL DEFAULT '',
	detail TEXT                               -- JSON or NULL
) STRICT;
CREATE INDEX audit_log_ts ON audit_log (ts, id);
CREATE INDEX audit_log_actor ON audit_log (actor, ts, id);
CREATE INDEX audit_log_action ON audit_log (action, ts, id);

CREATE TABLE tool_calls (
	id                INTEGER PRIMARY KEY AUTOINCREMENT,
	ts                INTEGER NOT NULL,
	key_alias         TEXT    NOT NULL DEFAULT '',
	user_id           TEXT    NOT NULL DEFAULT '',
	team_id           TEXT    NOT NULL DEFAULT '',
	server            TEXT    NOT NULL,
	tool              TEXT    NOT NULL,
	duration_ms       INTEGER NOT NULL,
	outcome           TEXT    NOT NULL,
	error_class       TEXT    NOT NULL DEFAULT '',
	session_id_prefix TEXT    NOT NULL DEFAULT '',
	request_bytes     INTEGER NOT NULL DEFAULT 0,
	response_bytes    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX tool_calls_ts ON tool_calls (ts, id);
CREATE INDEX tool_calls_key ON tool_calls (key_alias, ts, id);
CREATE INDEX tool_calls_tool ON tool_calls (server, tool, ts, id);
