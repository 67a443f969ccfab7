-- How far past its note an instance's leases may run (its lease, and how
-- far ahead of their time it claims): when it is taken for dead, its
-- leases are looked for that far ahead, whatever the instance that looks
-- is configured with.
ALTER TABLE instances ADD COLUMN reach_ms BIGINT NOT NULL DEFAULT 0;
