-- Terminals and tunnels: SSH public keys registered by the CLI, and each workshop's SSH host key.
CREATE TABLE ssh_keys (
  user_id      text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  fingerprint  text NOT NULL,
  public_key   text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, fingerprint)
);

CREATE TABLE workshop_host_keys (
  workshop_id  text PRIMARY KEY REFERENCES workshops(id) ON DELETE CASCADE,
  private_key  text NOT NULL,
  public_key   text NOT NULL
);
