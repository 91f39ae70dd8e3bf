-- The LLM gateway's meter (src/egress/gateway.ts, src/workshops/spend.ts). Each model request a
-- workshop sends through the gateway is one row of llm_requests, with the workshop's owner and
-- tenant at the time (kept when the workshop is deleted: per-user and per-tenant spend outlive it).
-- The workshop's running totals sit on its row, so the budget check before each request is one
-- primary-key read.
CREATE TABLE llm_requests (
  id             bigserial PRIMARY KEY,
  at             timestamptz NOT NULL DEFAULT now(),
  workshop_id    text NOT NULL,
  user_id        text,
  tenant_id      text NOT NULL,
  provider       text NOT NULL,
  model          text,
  status         integer NOT NULL,
  input_tokens   bigint NOT NULL,
  output_tokens  bigint NOT NULL,
  usage_reported boolean NOT NULL,
  cost_usd       numeric NOT NULL
);
CREATE INDEX llm_requests_tenant_user ON llm_requests (tenant_id, user_id);
CREATE INDEX llm_requests_workshop ON llm_requests (workshop_id);

ALTER TABLE workshops
  ADD COLUMN llm_spent_usd numeric NOT NULL DEFAULT 0,
  ADD COLUMN llm_requests bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_requests_unreported bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_input_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN llm_output_tokens bigint NOT NULL DEFAULT 0;
