-- Dead-lettering is kept as an event: see the PostgreSQL migration. SQLite
-- cannot change a CHECK constraint in place, so the table is rebuilt.
CREATE TABLE message_events_new (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    at             INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('Cancelled', 'Rescheduled', 'DeadLettered')),
    from_state     TEXT NOT NULL,
    delivery_time  INTEGER,
    account        TEXT NOT NULL,
    detail         TEXT
);
INSERT INTO message_events_new (seq, message_id, at, kind, from_state, delivery_time, account)
    SELECT e.seq, e.message_id, e.at, e.kind, e.from_state, e.delivery_time, m.account
    FROM message_events e JOIN messages m ON m.id = e.message_id;
DROP TABLE message_events;
ALTER TABLE message_events_new RENAME TO message_events;
CREATE INDEX message_events_by_message ON message_events (message_id, seq);
INSERT INTO message_events (message_id, at, kind, from_state, account, detail)
    SELECT id, dead_lettered_at, 'DeadLettered', 'Scheduled', account, last_error
    FROM messages WHERE dead_lettered_at IS NOT NULL;
CREATE INDEX message_events_dead_by_account ON message_events (account, at) WHERE kind = 'DeadLettered';
