-- How many messages each account has in state Scheduled
-- (`limits.scheduled_messages`), kept by triggers so that every statement
-- that moves messages in or out of Scheduled counts, whichever path it is.
-- Each statement appends one row per account it moved (its net change):
-- appends take no row lock, so no two transactions ever wait on one
-- another's counts (an upsert of one row per account would serialise an
-- account's writers and could deadlock two that touch two accounts in
-- turn). An account's count is the sum of its rows; the janitor folds them
-- into one row per account.
CREATE TABLE scheduled_counts (
    account text NOT NULL,
    n bigint NOT NULL
);
CREATE INDEX scheduled_counts_account ON scheduled_counts (account);

INSERT INTO scheduled_counts (account, n)
SELECT account, count(*) FROM messages WHERE state = 'Scheduled' GROUP BY account;

CREATE FUNCTION count_scheduled_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scheduled_counts (account, n)
    SELECT account, count(*) FROM inserted WHERE state = 'Scheduled' GROUP BY account;
    RETURN NULL;
END $$;

CREATE FUNCTION count_scheduled_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scheduled_counts (account, n)
    SELECT account, -count(*) FROM deleted WHERE state = 'Scheduled' GROUP BY account;
    RETURN NULL;
END $$;

-- Most updates (claims, leases, flags) leave every row Scheduled: two
-- scans find that, and nothing is written. Otherwise the two counts per
-- account are netted and what moved is appended.
CREATE FUNCTION count_scheduled_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM after_rows WHERE state <> 'Scheduled')
       AND NOT EXISTS (SELECT 1 FROM before_rows WHERE state <> 'Scheduled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO scheduled_counts (account, n)
    SELECT account, sum(d) FROM (
        SELECT account, -1 AS d FROM before_rows WHERE state = 'Scheduled'
        UNION ALL
        SELECT account, 1 AS d FROM after_rows WHERE state = 'Scheduled') moved
    GROUP BY account HAVING sum(d) <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER messages_count_inserted AFTER INSERT ON messages
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION count_scheduled_inserted();
CREATE TRIGGER messages_count_deleted AFTER DELETE ON messages
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION count_scheduled_deleted();
CREATE TRIGGER messages_count_updated AFTER UPDATE ON messages
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_scheduled_updated();
