-- Each attempt names its message's target (a message never changes target),
-- so the overview counts failed attempts per target from the index of
-- failures alone, without joining every message.
ALTER TABLE attempts ADD COLUMN target_id text;
UPDATE attempts a SET target_id = m.target_id FROM messages m WHERE m.id = a.message_id;
ALTER TABLE attempts ALTER COLUMN target_id SET NOT NULL;
DROP INDEX attempts_failed_by_account;
CREATE INDEX attempts_failed_by_account ON attempts (account, finished_at) INCLUDE (target_id)
    WHERE outcome <> 'Success';
