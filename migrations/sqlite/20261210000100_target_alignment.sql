-- See the PostgreSQL migration of the same name. SQLite's one writer flips
-- a target and its messages in one transaction, as before; the columns are
-- here so that the statements both stores share read the same table.
ALTER TABLE targets ADD COLUMN align_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE targets ADD COLUMN aligned_seq INTEGER NOT NULL DEFAULT 0;
