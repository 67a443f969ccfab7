-- The instances serving on this database, each seen every few seconds, so
-- that limits meant for the service as a whole (`api.rate_limit`) are
-- shared: each instance allows its part of them. Rows not seen for a minute
-- are deleted.
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    seen_ms BIGINT NOT NULL
);
