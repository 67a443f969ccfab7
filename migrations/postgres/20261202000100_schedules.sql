-- Recurring schedules (API.md §12). A schedule's runs become ordinary
-- messages a little ahead of their instant (`schedules.ahead`); the cursor
-- `next_run_at` is the first run not yet created, advanced under the row's
-- lock in the transaction that creates the runs' messages. The unique index
-- on (schedule_id, schedule_run) makes "exactly one message per run" a
-- property of the database, whatever the instances, restarts or clocks do.
CREATE TABLE schedules (
    id           text PRIMARY KEY,
    account      text NOT NULL,
    target_id    text NOT NULL REFERENCES targets (id) ON DELETE CASCADE,
    name         text NOT NULL,
    cron         text,
    every        text,
    time_zone    text NOT NULL,
    payload      bytea NOT NULL,
    ordering_key text,
    start_at     timestamptz,
    end_at       timestamptz,
    paused       boolean NOT NULL DEFAULT false,
    next_run_at  timestamptz,
    last_run_at  timestamptz,
    revision     bigint NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE NOT paused AND next_run_at IS NOT NULL;
CREATE INDEX schedules_by_account ON schedules (account, created_at DESC, id DESC);
CREATE INDEX schedules_by_target ON schedules (target_id);

ALTER TABLE messages
    ADD COLUMN schedule_id text,
    ADD COLUMN schedule_run timestamptz;
CREATE UNIQUE INDEX messages_schedule_run ON messages (schedule_id, schedule_run)
    WHERE schedule_id IS NOT NULL;
-- GET /messages?scheduleId=
CREATE INDEX messages_by_schedule ON messages (account, schedule_id, id DESC)
    WHERE schedule_id IS NOT NULL;
