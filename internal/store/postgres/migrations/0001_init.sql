-- Schema version 1. The same records as the SQLite backend's version 1
-- (internal/store/sqlite/migrations/0001_init.sql). Times are timestamptz
-- at millisecond precision (the store truncates them); lists, maps and
-- documents are JSON text, kept byte for byte (json and jsonb would
-- re-check or re-format what the store already validated). Names that are
-- listed in order use COLLATE "C": byte order, whatever the database's
-- locale. Never edit a released migration: add the next file instead.

CREATE TABLE keys (
	id             text        NOT NULL,
	alias          text        COLLATE "C" NOT NULL,
	key_hash       text        NOT NULL, -- sha256 hex of the secret; the lookup index
	key_prefix     text        NOT NULL DEFAULT '',
	user_id        text        NOT NULL DEFAULT '',
	team_id        text        NOT NULL DEFAULT '',
	servers        text,                 -- JSON array; NULL = all servers
	tools          text        NOT NULL DEFAULT '{}',
	deny_tools     text        NOT NULL DEFAULT '{}',
	toolsets       text        NOT NULL DEFAULT '[]',
	access_groups  text        NOT NULL DEFAULT '[]',
	allowed_cidrs  text        NOT NULL DEFAULT '[]',
	rate_limit_rpm bigint      NOT NULL DEFAULT 0,
	expires_at     timestamptz,          -- NULL = never
	admin          boolean     NOT NULL DEFAULT false,
	no_mcp         boolean     NOT NULL DEFAULT false,
	disabled       boolean     NOT NULL DEFAULT false,
	source         text        NOT NULL CHECK (source IN ('config', 'api')),
	created_at     timestamptz NOT NULL,
	updated_at     timestamptz NOT NULL,
	last_used_at   timestamptz,          -- NULL = never used
	-- Named, because the store tells a used alias from a used secret by
	-- the constraint that failed.
	CONSTRAINT keys_pkey PRIMARY KEY (id),
	CONSTRAINT keys_alias_unique UNIQUE (alias),
	CONSTRAINT keys_key_hash_unique UNIQUE (key_hash)
);

CREATE TABLE users (
	id         text        COLLATE "C" NOT NULL PRIMARY KEY,
	name       text        NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL
);

CREATE TABLE teams (
	id         text        COLLATE "C" NOT NULL PRIMARY KEY,
	name       text        NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL
);

CREATE TABLE objects (
	kind       text        NOT NULL,
	name       text        COLLATE "C" NOT NULL,
	doc        text        NOT NULL,
	version    bigint      NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (kind, name)
);

CREATE TABLE terminated_sessions (
	id_hash    text        NOT NULL PRIMARY KEY, -- sha256 hex of the session id
	expires_at timestamptz NOT NULL
);
CREATE INDEX terminated_sessions_expires ON terminated_sessions (expires_at);

-- Identity columns come from a sequence, which never hands out a number
-- twice, even after old rows are purged: a cursor never points at a
-- different record.
CREATE TABLE audit_log (
	id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	ts     timestamptz NOT NULL,
	actor  text        NOT NULL,
	action text        NOT NULL,
	target text        NOT NULL DEFAULT '',
	detail text                               -- JSON or NULL
);
CREATE INDEX audit_log_ts ON audit_log (ts, id);
CREATE INDEX audit_log_actor ON audit_log (actor, ts, id);
CREATE INDEX audit_log_action ON audit_log (action, ts, id);

CREATE TABLE tool_calls (
	id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	ts                timestamptz NOT NULL,
	key_alias         text        NOT NULL DEFAULT '',
	user_id           text        NOT NULL DEFAULT '',
	team_id           text        NOT NULL DEFAULT '',
	server            text        NOT NULL,
	tool              text        NOT NULL,
	duration_ms       bigint      NOT NULL,
	outcome           text        NOT NULL,
	error_class       text        NOT NULL DEFAULT '',
	session_id_prefix text        NOT NULL DEFAULT '',
	request_bytes     bigint      NOT NULL DEFAULT 0,
	response_bytes    bigint      NOT NULL DEFAULT 0
);
CREATE INDEX tool_calls_ts ON tool_calls (ts, id);
CREATE INDEX tool_calls_key ON tool_calls (key_alias, ts, id);
CREATE INDEX tool_calls_tool ON tool_calls (server, tool, ts, id);
