-- How many messages each account has in state Scheduled
-- (`limits.scheduled_messages`), kept by triggers so that every statement
-- that moves messages in or out of Scheduled counts, whichever path it is.
-- SQLite's one writer updates one row per account in place; PostgreSQL
-- appends a row per statement instead (see its migration). Both read an
-- account's count as the sum of its rows.
CREATE TABLE scheduled_counts (
    account TEXT PRIMARY KEY,
    n INTEGER NOT NULL
);

INSERT INTO scheduled_counts (account, n)
SELECT account, count(*) FROM messages WHERE state = 'Scheduled' GROUP BY account;

CREATE TRIGGER messages_count_inserted AFTER INSERT ON messages
WHEN NEW.state = 'Scheduled'
BEGIN
    INSERT INTO scheduled_counts (account, n) VALUES (NEW.account, 1)
    ON CONFLICT (account) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER messages_count_deleted AFTER DELETE ON messages
WHEN OLD.state = 'Scheduled'
BEGIN
    UPDATE scheduled_counts SET n = n - 1 WHERE account = OLD.account;
END;

CREATE TRIGGER messages_count_updated AFTER UPDATE OF state ON messages
WHEN (OLD.state = 'Scheduled') <> (NEW.state = 'Scheduled')
BEGIN
    INSERT INTO scheduled_counts (account, n)
    VALUES (NEW.account, CASE WHEN NEW.state = 'Scheduled' THEN 1 ELSE -1 END)
    ON CONFLICT (account) DO UPDATE SET n = n + excluded.n;
END;
