-- Identity: tenants, memberships (a user's role in a tenant), local passwords, users from an
-- external issuer, scoped and expiring API tokens, agent tokens bound to one workshop, and the
-- embedded OIDC issuer's state and signing keys.
CREATE TABLE tenants (
  id          text PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO tenants (id, name) VALUES ('tn-default', 'default');

ALTER TABLE users
  ADD COLUMN issuer                text NOT NULL DEFAULT 'local',
  ADD COLUMN subject               text,
  ADD COLUMN email                 text,
  ADD COLUMN password_hash         text,
  ADD COLUMN must_change_password  boolean NOT NULL DEFAULT false,
  ADD COLUMN disabled_at           timestamptz;
CREATE UNIQUE INDEX users_issuer_subject ON users (issuer, subject) WHERE subject IS NOT NULL;

CREATE TABLE memberships (
  user_id     text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  role        text NOT NULL CHECK (role IN ('viewer', 'member', 'maintainer', 'admin')),
  -- 'local': granted by an admin; 'groups': derived from the external issuer's groups claim.
  source      text NOT NULL DEFAULT 'local' CHECK (source IN ('local', 'groups')),
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, tenant_id)
);
INSERT INTO memberships (user_id, tenant_id, role) SELECT id, 'tn-default', role FROM users;
ALTER TABLE users DROP COLUMN role;

ALTER TABLE workshops ADD COLUMN tenant_id text REFERENCES tenants(id);
UPDATE workshops SET tenant_id = 'tn-default';
ALTER TABLE workshops ALTER COLUMN tenant_id SET NOT NULL;
-- Names are unique within a tenant: another tenant's names are neither visible nor reserved.
ALTER TABLE workshops DROP CONSTRAINT workshops_name_key;
CREATE UNIQUE INDEX workshops_tenant_name ON workshops (tenant_id, name);

ALTER TABLE api_tokens
  ADD COLUMN tenant_id     text REFERENCES tenants(id) ON DELETE CASCADE,
  -- The most this token may do: the effective role is the lower of this and the user's role.
  ADD COLUMN role          text CHECK (role IN ('viewer', 'member', 'maintainer', 'admin')),
  -- Agent tokens act only for this workshop and never decide an approval.
  ADD COLUMN workshop_id   text REFERENCES workshops(id) ON DELETE CASCADE,
  ADD COLUMN expires_at    timestamptz,
  ADD COLUMN last_used_at  timestamptz,
  -- The token that minted this one (a token made with a token): revoked with it, never outliving it.
  ADD COLUMN parent_id     text REFERENCES api_tokens(id) ON DELETE CASCADE;
UPDATE api_tokens SET tenant_id = 'tn-default', role = 'admin';
ALTER TABLE api_tokens ALTER COLUMN tenant_id SET NOT NULL, ALTER COLUMN role SET NOT NULL;
CREATE INDEX api_tokens_user ON api_tokens (user_id);

-- The embedded issuer's state (oidc-provider adapter): sessions, grants, device codes,
-- refresh tokens, interactions. Nothing of it lives in memory.
CREATE TABLE oidc_payloads (
  type         text NOT NULL,
  id           text NOT NULL,
  payload      jsonb NOT NULL,
  grant_id     text,
  user_code    text,
  uid          text,
  expires_at   timestamptz,
  consumed_at  timestamptz,
  PRIMARY KEY (type, id)
);
CREATE INDEX oidc_payloads_grant ON oidc_payloads (grant_id) WHERE grant_id IS NOT NULL;
CREATE INDEX oidc_payloads_user_code ON oidc_payloads (user_code) WHERE user_code IS NOT NULL;
CREATE INDEX oidc_payloads_uid ON oidc_payloads (uid) WHERE uid IS NOT NULL;
CREATE INDEX oidc_payloads_expires ON oidc_payloads (expires_at);

-- Signing keys of the embedded issuer; private halves encrypted with the server's master key
-- (AES-256-GCM). A rotated key stays published (retired_at set) until the tokens it signed expire.
CREATE TABLE signing_keys (
  kid           text PRIMARY KEY,
  alg           text NOT NULL,
  public_jwk    jsonb NOT NULL,
  private_jwk   text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  retired_at    timestamptz
);
