-- Workshop SSH host private keys are sealed with the server's master key (AES-256-GCM, like
-- secrets and signing keys). Rows written before this migration keep their clear `private_key`
-- until the server seals them at start (SshEndpoint.sealStoredKeys); exactly one of the two is set.
ALTER TABLE workshop_host_keys ADD COLUMN private_key_sealed text;
ALTER TABLE workshop_host_keys ALTER COLUMN private_key DROP NOT NULL;
ALTER TABLE workshop_host_keys
  ADD CONSTRAINT workshop_host_keys_one_private_key CHECK (num_nonnulls(private_key, private_key_sealed) = 1);
