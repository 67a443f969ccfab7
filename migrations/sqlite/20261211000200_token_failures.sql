-- Failed token requests, one row each, keyed by a hash of the client id or
-- of the source address: every instance counts the same failures
-- (`auth.token_attempts` per `auth.token_window`), so N instances do not
-- allow N times the attempts. Rows older than the window are purged.
CREATE TABLE token_failures (
    key TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX token_failures_key ON token_failures (key, at_ms);
