-- Dashboard sign-ins (docs/dashboard.md): the browser holds only a random session id in an
-- HttpOnly, SameSite=Strict cookie; its hash keys this row. The OIDC tokens the server got for
-- it (authorization code + PKCE against its own issuer) stay here, sealed with the master key.
CREATE TABLE browser_sessions (
  id_hash text PRIMARY KEY,
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  -- The tenant the user switched to; NULL: their first one.
  tenant_name text,
  access_token_sealed text NOT NULL,
  access_expires_at timestamptz NOT NULL,
  refresh_token_sealed text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX browser_sessions_user ON browser_sessions (user_id);
CREATE INDEX browser_sessions_expires ON browser_sessions (expires_at);
