-- Schema version 5: tool-integrity pins (issue 27): per server, the
-- approved fingerprint and definition of each tool, prompt and resource
-- template, the one awaiting review, and where the server came from.
CREATE TABLE pins (
	server              text        COLLATE "C" NOT NULL,
	kind                text        COLLATE "C" NOT NULL,
	name                text        COLLATE "C" NOT NULL,
	fingerprint         text        NOT NULL DEFAULT '',
	definition          text        NOT NULL DEFAULT '',
	pending             text        NOT NULL DEFAULT '',
	pending_definition  text        NOT NULL DEFAULT '',
	rejected            text        NOT NULL DEFAULT '',
	findings            text        NOT NULL DEFAULT '',
	source              text        NOT NULL DEFAULT '',
	version             text        NOT NULL DEFAULT '',
	approved_by         text        NOT NULL DEFAULT '',
	seen_at             timestamptz NOT NULL,
	updated_at          timestamptz NOT NULL,
	PRIMARY KEY (server, kind, name)
);
