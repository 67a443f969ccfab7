-- A message's target is checked by the statements that insert it: each joins
-- its target row FOR KEY SHARE (which also orders it against an enable or
-- disable), so an insert for a target being deleted waits and then inserts
-- nothing. The foreign key checked the same again, row by row, with a
-- trigger: a quarter of the time a 1,000-message batch spent in PostgreSQL.
-- Deleting a target (its row locked FOR UPDATE first) deletes its messages
-- itself, as the key's ON DELETE CASCADE did.
ALTER TABLE messages DROP CONSTRAINT messages_target_id_fkey;
