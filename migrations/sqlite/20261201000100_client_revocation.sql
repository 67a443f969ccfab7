-- A revoked client can no longer get tokens; the tokens it has are refused
-- once every instance has seen the revocation (within seconds).
ALTER TABLE clients ADD COLUMN revoked_at INTEGER;
-- Each instance asks, every few seconds, for the clients revoked lately.
CREATE INDEX clients_revoked ON clients (revoked_at) WHERE revoked_at IS NOT NULL;
CREATE INDEX clients_by_account ON clients (account, created_at);
