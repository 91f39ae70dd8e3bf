-- Foundation: users, API tokens, server nodes and workshops.
CREATE TABLE users (
  id          text PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  role        text NOT NULL CHECK (role IN ('viewer', 'member', 'maintainer', 'admin')),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_tokens (
  id          text PRIMARY KEY,
  user_id     text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  name        text NOT NULL,
  token_hash  text NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);

-- Host uids handed to workshops (root mode): never reused, never shared.
CREATE SEQUENCE workshop_uid_seq;

CREATE TABLE workshops (
  id             text PRIMARY KEY,
  name           text NOT NULL UNIQUE,
  owner_id       text REFERENCES users(id) ON DELETE SET NULL,
  node_id        text NOT NULL,
  status         text NOT NULL CHECK (status IN ('Building', 'Running', 'Suspended', 'Failed', 'Deleting')),
  status_reason  text,
  repo           text NOT NULL,
  uid            integer NOT NULL UNIQUE,
  cpus           real NOT NULL,
  memory_bytes   bigint NOT NULL,
  pids           integer NOT NULL,
  budget_usd     numeric(14, 2),
  env            jsonb NOT NULL DEFAULT '{}',
  forward_ports  integer[] NOT NULL DEFAULT '{}',
  warnings       jsonb NOT NULL DEFAULT '[]',
  sandbox        jsonb,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX workshops_node_status ON workshops (node_id, status);
