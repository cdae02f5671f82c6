-- Schema version 7: the input phase of gateway-run MCP tasks (issue 26).
-- tasks.input holds a task's pending input requests, sealed by the task
-- table as results are (the store keeps bytes); task_answers holds the
-- answers received for them until the task's run takes them, and goes
-- with its task (foreign keys are on for every connection).
ALTER TABLE tasks ADD COLUMN input BLOB NOT NULL DEFAULT x'';
CREATE TABLE task_answers (
	task_id  TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
	key      TEXT    NOT NULL,
	body     BLOB    NOT NULL,
	created  INTEGER NOT NULL,
	PRIMARY KEY (task_id, key)
) STRICT;
