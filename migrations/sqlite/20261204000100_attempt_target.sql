-- Each attempt names its message's target (a message never changes target),
-- so the overview counts failed attempts per target from the index of
-- failures alone, without joining every message.
ALTER TABLE attempts ADD COLUMN target_id TEXT NOT NULL DEFAULT '';
UPDATE attempts SET target_id = (SELECT m.target_id FROM messages m WHERE m.id = attempts.message_id);
DROP INDEX attempts_failed_by_account;
CREATE INDEX attempts_failed_by_account ON attempts (account, finished_at, target_id)
    WHERE outcome <> 'Success';
