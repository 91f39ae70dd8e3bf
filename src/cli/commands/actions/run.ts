import type { ActionExecution, ActionPlan, CatalogItem, ExecutionSummary, JournalRead } from '../../../actions/index.js';
import { AtelierError } from '../../../core/index.js';
import { call } from '../../client.js';
import type { CommandContext } from '../../context.js';

const BASE = '/api/workspace/actions';

/** `--param k=v` (repeatable): a value starting with [ or { is JSON (lists, objects); anything else is a string. */
export function parseParams(pairs: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new AtelierError('INVALID_ARGUMENT', `--param takes KEY=VALUE, got "${pair}"`, { field: 'param' });
    const key = pair.slice(0, eq);
    const raw = pair.slice(eq + 1);
    if (/^\s*[[{]/.test(raw)) {
      try {
        out[key] = JSON.parse(raw) as unknown;
      } catch (err) {
        throw new AtelierError('INVALID_ARGUMENT', `--param ${key}: not valid JSON (${(err as Error).message})`, { field: key });
      }
    } else out[key] = raw;
  }
  return out;
}

/** `atelier actions list --project P`: the catalog with its preconditions evaluated now. */
export async function listActions(ctx: CommandContext, project: string): Promise<CatalogItem[]> {
  return (await call<{ items: CatalogItem[] }>(await ctx.target(), { method: 'GET', path: `${BASE}?${new URLSearchParams({ project })}` }))
    .items;
}

/** `atelier actions plan ACTION --project P --param k=v…`: nothing is written but the journal's plan line. */
export async function planAction(ctx: CommandContext, action: string, project: string, params: string[]): Promise<ActionPlan> {
  return call(await ctx.target(), {
    method: 'POST',
    path: `${BASE}/${encodeURIComponent(action)}/plan`,
    body: { project, action_id: action, parameters: parseParams(params) },
  });
}

export async function getPlan(ctx: CommandContext, planId: string): Promise<ActionPlan> {
  return call(await ctx.target(), { method: 'GET', path: `${BASE}/plans/${encodeURIComponent(planId)}` });
}

/** Applies exactly the plan shown (its id and fingerprint). */
export async function applyPlan(ctx: CommandContext, plan: ActionPlan): Promise<ActionExecution> {
  return call(await ctx.target(), {
    method: 'POST',
    path: `${BASE}/${encodeURIComponent(plan.actionId)}/apply`,
    body: { plan_id: plan.planId, fingerprint: plan.fingerprint },
  });
}

export async function getExecution(ctx: CommandContext, executionId: string): Promise<ExecutionSummary & { project: string }> {
  return call(await ctx.target(), { method: 'GET', path: `${BASE}/executions/${encodeURIComponent(executionId)}` });
}

/** `atelier actions rollback EXECUTION_ID`: applies the recorded inverse and verifies it. */
export async function rollbackExecution(ctx: CommandContext, executionId: string): Promise<ActionExecution> {
  const ex = await getExecution(ctx, executionId);
  return call(await ctx.target(), {
    method: 'POST',
    path: `${BASE}/${encodeURIComponent(ex.actionId)}/rollback`,
    body: { execution_id: executionId },
  });
}

/** `atelier actions journal --project P`. */
export async function readActionJournal(ctx: CommandContext, project: string): Promise<JournalRead & { project: string }> {
  return call(await ctx.target(), { method: 'GET', path: `${BASE}/journal?${new URLSearchParams({ project })}` });
}
