-- Schema version 7: the input phase of gateway-run MCP tasks (issue 26).
-- tasks.input holds a task's pending input requests, sealed by the task
-- table as results are (the store keeps bytes); task_answers holds the
-- answers received for them until the task's run takes them, and goes
-- with its task.
ALTER TABLE tasks ADD COLUMN input bytea NOT NULL DEFAULT ''::bytea;
CREATE TABLE task_answers (
	task_id  text        COLLATE "C" NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
	key      text        COLLATE "C" NOT NULL,
	body     bytea       NOT NULL,
	created  timestamptz NOT NULL,
	PRIMARY KEY (task_id, key)
);
