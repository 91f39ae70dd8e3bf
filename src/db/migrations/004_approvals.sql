-- Approvals (human in the loop): the specification's hitl_requests table, exactly; who filed
-- each request and whether its effect was applied (hitl_request_context); and an append-only,
-- hash-chained audit of every creation, decision and expiry (hitl_audit).
CREATE TYPE hitl_status AS ENUM ('PENDING', 'APPROVED', 'REJECTED', 'EXPIRED');
CREATE TYPE hitl_category AS ENUM ('ALLOWLIST_EXPANSION', 'SECRET_REQUEST', 'PR_GATEWAY', 'SHELL_COMMAND');

CREATE TABLE hitl_requests (
    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    workshop_id VARCHAR(128) NOT NULL,
    category hitl_category NOT NULL,
    requested_by VARCHAR(128) NOT NULL, -- "agent/claude-code" ou "pm-engine"
    payload JSONB NOT NULL,             -- Détails de la demande (ex: domaine, justification)
    status hitl_status NOT NULL DEFAULT 'PENDING',
    decided_by VARCHAR(128),            -- Email / sub OIDC de l'approbateur
    decision_reason TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    expires_at TIMESTAMPTZ NOT NULL DEFAULT (NOW() + INTERVAL '15 minutes'),
    decided_at TIMESTAMPTZ
);

CREATE INDEX idx_hitl_workshop ON hitl_requests(workshop_id, status);

-- What the specification's table does not say: the tenant (fixed at creation, so a request of a
-- deleted workshop stays visible to its tenant only), the user who filed it (never allowed to
-- decide it; NULL for an agent token) and when its effect was applied (exactly once).
CREATE TABLE hitl_request_context (
  request_id          uuid PRIMARY KEY REFERENCES hitl_requests(id),
  tenant_id           text NOT NULL,
  requester_user_id   text,
  requester_kind      text NOT NULL CHECK (requester_kind IN ('user', 'agent', 'system')),
  effect_applied_at   timestamptz,
  effect_error        text
);
CREATE INDEX hitl_request_context_tenant ON hitl_request_context (tenant_id);
CREATE INDEX hitl_requests_pending_expiry ON hitl_requests (expires_at) WHERE status = 'PENDING';

-- The audit: one row per creation, decision and expiry. Rows are chained: each row's hash covers
-- its content and the previous row's hash, so changing, removing or reordering any row breaks
-- every hash after it (`atelier audit verify`). UPDATE, DELETE and TRUNCATE are refused.
CREATE TABLE hitl_audit (
  seq           bigint PRIMARY KEY,
  at            timestamptz NOT NULL DEFAULT now(),
  request_id    uuid NOT NULL,
  event         text NOT NULL CHECK (event IN ('CREATED', 'APPROVED', 'REJECTED', 'EXPIRED')),
  subject       text NOT NULL,
  channel       text NOT NULL CHECK (channel IN ('cli', 'slack', 'dashboard', 'api', 'system')),
  ip            text,
  request_hash  text NOT NULL,
  prev_hash     text NOT NULL,
  hash          text NOT NULL
);
CREATE INDEX hitl_audit_request ON hitl_audit (request_id);

-- The digest of one audit row: every field, in a fixed order, with the previous row's hash.
CREATE FUNCTION hitl_audit_digest(a hitl_audit) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(concat_ws(E'\x1f',
    a.seq::text, to_char(a.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), a.request_id::text, a.event, a.subject,
    a.channel, coalesce(a.ip, ''), a.request_hash, a.prev_hash), 'UTF8')), 'hex')
$$;

-- The digest of a request as it stands (what was decided on): id, workshop, category, requester,
-- payload, times, status and decider.
CREATE FUNCTION hitl_request_digest(r hitl_requests) RETURNS text LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(concat_ws(E'\x1f',
    r.id::text, r.workshop_id, r.category::text, r.requested_by, r.payload::text, r.status::text,
    coalesce(r.decided_by, ''), coalesce(r.decision_reason, ''),
    to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
    to_char(r.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
    coalesce(to_char(r.decided_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '')), 'UTF8')), 'hex')
$$;

-- Appends are serialised by a transaction-level advisory lock: the sequence number and the
-- previous hash are read under it, so two concurrent decisions can never fork the chain.
CREATE FUNCTION hitl_audit_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  last hitl_audit;
BEGIN
  PERFORM pg_advisory_xact_lock(1097164912);
  SELECT * INTO last FROM hitl_audit ORDER BY seq DESC LIMIT 1;
  NEW.seq := coalesce(last.seq, 0) + 1;
  NEW.at := clock_timestamp();
  NEW.prev_hash := coalesce(last.hash, repeat('0', 64));
  NEW.hash := hitl_audit_digest(NEW);
  RETURN NEW;
END
$$;
CREATE TRIGGER hitl_audit_chain BEFORE INSERT ON hitl_audit FOR EACH ROW EXECUTE FUNCTION hitl_audit_chain();

CREATE FUNCTION hitl_audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'hitl_audit is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER hitl_audit_no_update BEFORE UPDATE OR DELETE ON hitl_audit FOR EACH ROW EXECUTE FUNCTION hitl_audit_refuse();
CREATE TRIGGER hitl_audit_no_truncate BEFORE TRUNCATE ON hitl_audit FOR EACH STATEMENT EXECUTE FUNCTION hitl_audit_refuse();

-- The project's `approvals.commands` (atelier.yaml): exec commands that wait for a human.
ALTER TABLE workshops ADD COLUMN approval_commands jsonb NOT NULL DEFAULT '[]';

-- Slack: the message posted for each request (so it can be updated once decided), and the
-- signatures of interaction requests already accepted (a replay within the window is refused,
-- whichever replica it reaches).
CREATE TABLE hitl_slack_messages (
  request_id  uuid PRIMARY KEY REFERENCES hitl_requests(id),
  channel     text,
  ts          text,
  posted_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE slack_seen_signatures (
  signature  text PRIMARY KEY,
  seen_at    timestamptz NOT NULL DEFAULT now()
);
