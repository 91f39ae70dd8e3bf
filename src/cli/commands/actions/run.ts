import type { ActionExecution, ActionPlan, CatalogItem } from '../../../actions/index.js';
import { AtelierError, type ActionJournalView, type RouteResponse } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';

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
  return (await (await ctx.api()).call('listActions', { query: { project } })).items;
}

/** `atelier actions plan ACTION --project P --param k=v…`: nothing is written but the journal's plan line. */
export async function planAction(ctx: CommandContext, action: string, project: string, params: string[]): Promise<ActionPlan> {
  const body = { project, action_id: action, parameters: parseParams(params) };
  return await (await ctx.api()).call('planAction', { params: { id: action }, body });
}

export async function getPlan(ctx: CommandContext, planId: string): Promise<ActionPlan> {
  return await (await ctx.api()).call('getPlan', { params: { planId } });
}

/** Applies exactly the plan shown (its id and fingerprint). */
export async function applyPlan(ctx: CommandContext, plan: ActionPlan): Promise<ActionExecution> {
  const body = { plan_id: plan.planId, fingerprint: plan.fingerprint };
  return await (await ctx.api()).call('applyPlan', { params: { id: plan.actionId }, body });
}

export async function getExecution(ctx: CommandContext, executionId: string): Promise<RouteResponse<'getExecution'>> {
  return await (await ctx.api()).call('getExecution', { params: { executionId } });
}

/** `atelier actions rollback EXECUTION_ID`: applies the recorded inverse and verifies it. */
export async function rollbackExecution(ctx: CommandContext, executionId: string): Promise<ActionExecution> {
  const ex = await getExecution(ctx, executionId);
  const body = { execution_id: executionId };
  return await (await ctx.api()).call('rollbackExecution', { params: { id: ex.actionId }, body });
}

/** `atelier actions journal --project P`. */
export async function readActionJournal(ctx: CommandContext, project: string): Promise<ActionJournalView> {
  return await (await ctx.api()).call('actionJournal', { query: { project } });
}
