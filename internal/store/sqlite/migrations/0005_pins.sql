-- Schema version 5: tool-integrity pins (issue 27): per server, the
-- approved fingerprint and definition of each tool, prompt and resource
-- template, the one awaiting review, and where the server came from.
CREATE TABLE pins (
	server              TEXT    NOT NULL,
	kind                TEXT    NOT NULL,
	name                TEXT    NOT NULL,
	fingerprint         TEXT    NOT NULL DEFAULT '',
	definition          TEXT    NOT NULL DEFAULT '',
	pending             TEXT    NOT NULL DEFAULT '',
	pending_definition  TEXT    NOT NULL DEFAULT '',
	rejected            TEXT    NOT NULL DEFAULT '',
	findings            TEXT    NOT NULL DEFAULT '',
	source              TEXT    NOT NULL DEFAULT '',
	version             TEXT    NOT NULL DEFAULT '',
	approved_by         TEXT    NOT NULL DEFAULT '',
	seen_at             INTEGER NOT NULL,
	updated_at          INTEGER NOT NULL,
	PRIMARY KEY (server, kind, name)
) STRICT;
