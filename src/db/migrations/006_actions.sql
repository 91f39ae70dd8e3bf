-- Typed infrastructure actions (ADR-008): registered projects, plans (applied at most once) and
-- an index of executions. The journal in each project (.atelier/runtime/actions/journal.jsonl)
-- stays the proof and the source of every rollback; these rows only find it again.
CREATE TABLE projects (
  id          text PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name        text NOT NULL,
  path        text NOT NULL,
  created_by  text REFERENCES users(id) ON DELETE SET NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, name),
  UNIQUE (tenant_id, path)
);

CREATE TABLE action_plans (
  id            text PRIMARY KEY,
  project_id    text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  action_id     text NOT NULL,
  fingerprint   text NOT NULL,
  parameters    jsonb NOT NULL,
  planned       jsonb NOT NULL,
  created_by    text REFERENCES users(id) ON DELETE SET NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz NOT NULL,
  -- Set once, by the apply that wins: a plan runs at most once.
  execution_id  text UNIQUE
);
CREATE INDEX action_plans_expiry ON action_plans (expires_at);

CREATE TABLE action_executions (
  id          text PRIMARY KEY,
  project_id  text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  plan_id     text NOT NULL,
  action_id   text NOT NULL,
  status      text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
