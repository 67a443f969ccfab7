-- Secrets at rest (API.md §2). With secrets.encryption_key set, a target's
-- secrets are sealed (AES-256-GCM) into sealed_secrets, under the key whose
-- id is secrets_key_id, and config holds the rest with the secrets masked.
-- NULL in both: config holds the secrets in plain text (written without a key).
ALTER TABLE targets
    ADD COLUMN secrets_key_id text,
    ADD COLUMN sealed_secrets bytea,
    ADD CONSTRAINT targets_secrets_sealed_whole
        CHECK ((secrets_key_id IS NULL) = (sealed_secrets IS NULL));

-- NULL: secret is the plain key; otherwise secret is nonce ‖ ciphertext
-- under the key with this id.
ALTER TABLE signing_keys ADD COLUMN key_id text;
