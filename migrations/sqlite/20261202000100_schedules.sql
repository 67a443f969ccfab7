-- Recurring schedules (API.md §12): see the PostgreSQL migration. The
-- embedded store has one writer; the unique index on (schedule_id,
-- schedule_run) still makes one message per run a property of the data.
CREATE TABLE schedules (
    id           TEXT PRIMARY KEY,
    account      TEXT NOT NULL,
    target_id    TEXT NOT NULL REFERENCES targets (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    cron         TEXT,
    every        TEXT,
    time_zone    TEXT NOT NULL,
    payload      TEXT NOT NULL,
    ordering_key TEXT,
    start_at     INTEGER,
    end_at       INTEGER,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_run_at  INTEGER,
    last_run_at  INTEGER,
    revision     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE paused = 0 AND next_run_at IS NOT NULL;
CREATE INDEX schedules_by_account ON schedules (account, created_at DESC, id DESC);
CREATE INDEX schedules_by_target ON schedules (target_id);

ALTER TABLE messages ADD COLUMN schedule_id TEXT;
ALTER TABLE messages ADD COLUMN schedule_run INTEGER;
CREATE UNIQUE INDEX messages_schedule_run ON messages (schedule_id, schedule_run)
    WHERE schedule_id IS NOT NULL;
CREATE INDEX messages_by_schedule ON messages (account, schedule_id, id DESC)
    WHERE schedule_id IS NOT NULL;
