-- The wait a receiver asked for before the next attempt (Retry-After on a
-- 429 or 503), as applied after retry.max_retry_after; null when it asked none.
ALTER TABLE attempts ADD COLUMN retry_after_ms INTEGER;
