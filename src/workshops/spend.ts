// What workshops spend on models through the LLM gateway (src/egress/gateway.ts): each request
// recorded with the workshop's owner and tenant, the workshop's running totals on its row (the
// budget check reads them), and the budget itself, which its owner (or a maintainer) can raise.
import { AtelierError } from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import type { LlmRequestRecord } from '../egress/index.js';

export interface SpendTotals {
  spentUsd: number;
  requests: number;
  /** Requests whose answer reported no usage (counted, priced at 0). */
  requestsWithoutUsage: number;
  inputTokens: number;
  outputTokens: number;
}

/** The highest budget a workshop may have (the create request's own bound). */
export const MAX_BUDGET_USD = 1_000_000;

export class SpendLedger {
  constructor(private readonly pool: Pool) {}

  /** The workshop's budget (null: none) and its spend so far; undefined when there is no such workshop. */
  async budgetOf(workshopId: string): Promise<{ budgetUsd: number | null; spentUsd: number } | undefined> {
    const [r] = await queryRows<{ budget_usd: string | null; llm_spent_usd: string }>(
      this.pool,
      'SELECT budget_usd, llm_spent_usd FROM workshops WHERE id = $1',
      [workshopId],
    );
    return r ? { budgetUsd: r.budget_usd === null ? null : Number(r.budget_usd), spentUsd: Number(r.llm_spent_usd) } : undefined;
  }

  /**
   * Adds one request to the workshop's totals and to the ledger (with its owner and tenant), in
   * one statement; returns whose it was (undefined: the workshop is gone, nothing recorded).
   */
  async record(workshopId: string, r: LlmRequestRecord): Promise<{ tenantId: string; userId: string | null } | undefined> {
    const [row] = await queryRows<{ tenant_id: string; user_id: string | null }>(
      this.pool,
      `WITH w AS (
         UPDATE workshops SET llm_spent_usd = llm_spent_usd + $2, llm_requests = llm_requests + 1,
                llm_requests_unreported = llm_requests_unreported + (CASE WHEN $3 THEN 0 ELSE 1 END),
                llm_input_tokens = llm_input_tokens + $4, llm_output_tokens = llm_output_tokens + $5
          WHERE id = $1 RETURNING id, owner_id, tenant_id)
       INSERT INTO llm_requests (workshop_id, user_id, tenant_id, provider, model, status, input_tokens, output_tokens, usage_reported, cost_usd)
       SELECT w.id, w.owner_id, w.tenant_id, $6, $7, $8, $4, $5, $3, $2 FROM w
       RETURNING tenant_id, user_id`,
      [workshopId, r.costUsd, r.usageReported, r.inputTokens, r.outputTokens, r.provider, r.model, r.status],
    );
    return row ? { tenantId: row.tenant_id, userId: row.user_id } : undefined;
  }

  /** Spend by user of a tenant (the workshops deleted since included), and the tenant's whole. */
  async tenantTotals(tenantId: string): Promise<{ tenant: SpendTotals; users: (SpendTotals & { userId: string | null })[] }> {
    const rows = await queryRows<{ user_id: string | null; spent: string; n: string; unreported: string; input: string; output: string }>(
      this.pool,
      `SELECT user_id, sum(cost_usd) AS spent, count(*) AS n, count(*) FILTER (WHERE NOT usage_reported) AS unreported,
              sum(input_tokens) AS input, sum(output_tokens) AS output
         FROM llm_requests WHERE tenant_id = $1 GROUP BY user_id ORDER BY user_id`,
      [tenantId],
    );
    const users = rows.map((r) => ({
      userId: r.user_id,
      spentUsd: Number(r.spent),
      requests: Number(r.n),
      requestsWithoutUsage: Number(r.unreported),
      inputTokens: Number(r.input),
      outputTokens: Number(r.output),
    }));
    const tenant: SpendTotals = { spentUsd: 0, requests: 0, requestsWithoutUsage: 0, inputTokens: 0, outputTokens: 0 };
    for (const u of users) {
      tenant.spentUsd += u.spentUsd;
      tenant.requests += u.requests;
      tenant.requestsWithoutUsage += u.requestsWithoutUsage;
      tenant.inputTokens += u.inputTokens;
      tenant.outputTokens += u.outputTokens;
    }
    return { tenant, users };
  }

  /** Sets the workshop's budget (null: none); its ATELIER_MAX_BUDGET_USD follows for new commands. */
  async setBudget(workshopId: string, budgetUsd: number | null): Promise<void> {
    if (budgetUsd !== null && !(Number.isFinite(budgetUsd) && budgetUsd >= 0 && budgetUsd <= MAX_BUDGET_USD))
      throw new AtelierError('INVALID_ARGUMENT', `budgetUsd: give a number of USD from 0 to ${MAX_BUDGET_USD}, or null for none`, {
        field: 'budgetUsd',
      });
    await queryRows(
      this.pool,
      `UPDATE workshops SET budget_usd = $2,
              env = CASE WHEN $2::numeric IS NULL THEN env - 'ATELIER_MAX_BUDGET_USD'
                         ELSE jsonb_set(env, '{ATELIER_MAX_BUDGET_USD}', to_jsonb($2::numeric::text)) END,
              updated_at = now()
        WHERE id = $1`,
      [workshopId, budgetUsd],
    );
  }
}

/** A workshop row's totals, as the API shows them. */
export function spendOfRow(r: {
  llm_spent_usd?: string;
  llm_requests?: string;
  llm_requests_unreported?: string;
  llm_input_tokens?: string;
  llm_output_tokens?: string;
}): SpendTotals {
  return {
    spentUsd: Number(r.llm_spent_usd ?? 0),
    requests: Number(r.llm_requests ?? 0),
    requestsWithoutUsage: Number(r.llm_requests_unreported ?? 0),
    inputTokens: Number(r.llm_input_tokens ?? 0),
    outputTokens: Number(r.llm_output_tokens ?? 0),
  };
}
