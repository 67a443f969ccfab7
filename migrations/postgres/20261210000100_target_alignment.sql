-- Enabling or disabling a target no longer changes every message of the
-- target in the transaction that flips `enabled` (which held the target's
-- row, and so every insert for it, for as long as that took): the flip
-- commits alone, and the messages' `paused` flags follow in short batches.
-- `align_seq` counts the flips, `aligned_seq` the last flip whose batches
-- all finished; a target with `align_seq > aligned_seq` is being brought in
-- line, and the janitor finishes what an instance that stopped left.
-- Meanwhile a claim never leases a message of a disabled target (it pauses
-- it instead).
ALTER TABLE targets
    ADD COLUMN align_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN aligned_seq bigint NOT NULL DEFAULT 0;
CREATE INDEX targets_aligning ON targets (id) WHERE align_seq > aligned_seq;
