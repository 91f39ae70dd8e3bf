-- SECRET_REQUEST in use mode (docs/approvals.md): the grant binds the secret to one host at the
-- egress proxy instead of putting the value in the workshop. `binding` is the atelier.yaml
-- `egress.credentials` entry it makes ({host, header, value}); NULL: a reveal grant (a file and a variable).
ALTER TABLE secret_grants ADD COLUMN binding jsonb;
