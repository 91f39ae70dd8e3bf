import { apply } from './engine/apply.js';
import { createEngineContext } from './engine/context.js';
import { execution, journal } from './engine/journalAccess.js';
import type { ActionService, ActionServiceDeps } from './engine/model.js';
import { catalog, getPlan, plan } from './engine/plan.js';
import { reconcileStacks } from './engine/reconcile.js';
import { rollback } from './engine/rollback.js';

export type { ActionExecution, ActionPlan, ActionService, ActionServiceDeps, CatalogItem } from './engine/model.js';

/** The plan/apply/verify/rollback engine over the catalog, with the journal as its proof. */
export function createActionService(deps: ActionServiceDeps): ActionService {
  const ctx = createEngineContext(deps);
  return {
    catalog: (actor, project) => catalog(ctx, actor, project),
    plan: (actor, project, actionId, parameters) => plan(ctx, actor, project, actionId, parameters),
    getPlan: (actor, planId) => getPlan(ctx, actor, planId),
    apply: (actor, actionId, planId, fingerprint) => apply(ctx, actor, actionId, planId, fingerprint),
    rollback: (actor, actionId, executionId) => rollback(ctx, actor, actionId, executionId),
    reconcileStacks: (log) => reconcileStacks(ctx, log),
    journal: (actor, project) => journal(ctx, actor, project),
    execution: (actor, executionId) => execution(ctx, actor, executionId),
  };
}
