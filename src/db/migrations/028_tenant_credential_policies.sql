-- A tenant's credential policy (issue 22), set by its maintainers: bindings every workshop of the
-- tenant created from now on gets, and hosts that no project binding nor SECRET_REQUEST may bind.
CREATE TABLE tenant_credential_policies (
  tenant_id  text PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
  policy     jsonb NOT NULL,
  set_by     text NOT NULL,
  set_at     timestamptz NOT NULL DEFAULT now()
);
