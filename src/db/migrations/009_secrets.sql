-- Secrets (issue 5, SECRET_REQUEST): values set by a tenant's maintainers, sealed with the
-- server's master key (AES-256-GCM, bound to tenant and name); never stored in clear.
CREATE TABLE secrets (
  tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name        text NOT NULL,
  sealed      text NOT NULL,
  set_by      text NOT NULL,
  set_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, name)
);

-- One grant per approved SECRET_REQUEST: the secret is in the workshop from granted_at to
-- expires_at; removed_at says the server took it out again (expiry, deletion of the secret).
CREATE TABLE secret_grants (
  request_id   uuid PRIMARY KEY REFERENCES hitl_requests(id),
  workshop_id  text NOT NULL,
  tenant_id    text NOT NULL,
  name         text NOT NULL,
  granted_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  removed_at   timestamptz
);
CREATE INDEX secret_grants_live ON secret_grants (workshop_id) WHERE removed_at IS NULL;
