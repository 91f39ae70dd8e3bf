import { AtelierError, newId } from '../../core/index.js';
import { appendJournal } from '../journal.js';
import { snapshotPath } from '../projectFiles.js';
import { scrub, secretsOf } from '../redact.js';
import type { ActionEnv, ActionSpec, Actor, Inverse, ObservedEffect, Project } from '../types.js';
import { entry, setStatus, spec, withProjectLock, type EngineContext, type PlanRow } from './context.js';
import type { ActionExecution } from './model.js';
import { loadPlan } from './plan.js';

type Spec = ActionSpec<Record<string, unknown>>;

/** One apply of one plan, as its phases see it. */
interface Applying {
  ctx: EngineContext;
  env: ActionEnv;
  s: Spec;
  row: PlanRow;
  planId: string;
  project: Project;
  actor: Actor;
}

/** The snapshot a restore will read is named after the execution that takes it. */
function bindInverse(inverse: Inverse, executionId: string): Inverse {
  if (inverse.kind === 'restore-file' && inverse.snapshot !== null)
    return { ...inverse, snapshot: snapshotPath(executionId, inverse.snapshot) };
  if (inverse.kind === 'service' && inverse.file)
    return { ...inverse, file: bindInverse(inverse.file, executionId) as Inverse & { kind: 'restore-file' } };
  return inverse;
}

/** Applies the plan that was shown, if it still is what was shown: effects, then verification, all in the journal. */
export async function apply(
  ctx: EngineContext,
  actor: Actor,
  actionId: string,
  planId: string,
  fingerprint: string,
): Promise<ActionExecution> {
  const s = spec(actionId);
  const { row, project } = await loadPlan(ctx, actor, planId);
  checkApplicable(ctx, s, row, planId, fingerprint);
  const a: Applying = { ctx, env: ctx.envOf(project), s, row, planId, project, actor };
  return withProjectLock(ctx, project, async () => runExecution(a, await startExecution(a)));
}

/** What can be told without the lock: the action, its class, the fingerprint, a first apply, the expiry. */
function checkApplicable(ctx: EngineContext, s: Spec, row: PlanRow, planId: string, fingerprint: string): void {
  if (row.action_id !== s.id)
    throw new AtelierError('PLAN_FINGERPRINT_MISMATCH', `plan ${planId} is a plan of ${row.action_id}, not of ${s.id}`, {
      plan: planId,
    });
  if (!s.apply || !s.verify)
    throw new AtelierError('UNSUPPORTED', `${s.id} is class ${s.class}: it is never applied, run the planned command yourself`, {
      action: s.id,
    });
  if (typeof fingerprint !== 'string' || fingerprint !== row.fingerprint)
    throw new AtelierError(
      'PLAN_FINGERPRINT_MISMATCH',
      `the fingerprint sent does not match plan ${planId}: apply only the plan you were shown`,
      {
        plan: planId,
      },
    );
  if (row.execution_id)
    throw new AtelierError(
      'PLAN_ALREADY_APPLIED',
      `plan ${planId} was already applied (execution ${row.execution_id}): plan again for a new change`,
      {
        plan: planId,
        executionId: row.execution_id,
      },
    );
  if (row.expires_at.getTime() <= ctx.now().getTime())
    throw new AtelierError('PLAN_EXPIRED', `plan ${planId} expired at ${row.expires_at.toISOString()}: plan again`, { plan: planId });
}

/** Under the lock: the plan is not stale, it is claimed, and apply_started is journaled before anything changes. */
async function startExecution({ ctx, env, s, row, planId, project, actor }: Applying): Promise<string> {
  // Stale: an input changed since the plan (also one that was absent and exists now).
  const current = s.inputs(env, row.parameters);
  for (const [name, planned] of Object.entries(row.planned.inputs)) {
    if (current[name] !== planned)
      throw new AtelierError(
        'PLAN_STALE',
        `${name} changed since plan ${planId} was made: nothing was applied; plan again to see the new diff`,
        {
          plan: planId,
          input: name,
          planned,
          now: current[name] ?? 'absent',
        },
      );
  }
  const executionId = newId('exec');
  const claimed = await ctx.pool.query('UPDATE action_plans SET execution_id = $2 WHERE id = $1 AND execution_id IS NULL RETURNING id', [
    planId,
    executionId,
  ]);
  if (claimed.rowCount !== 1)
    throw new AtelierError('PLAN_ALREADY_APPLIED', `plan ${planId} was already applied: plan again for a new change`, {
      plan: planId,
    });
  const inverse = bindInverse(row.planned.inverse, executionId);
  // No journal, no effect: apply_started (with the inverse) is on disk before anything changes.
  try {
    appendJournal(project.path, entry(ctx, 'apply_started', project, s, row, actor, executionId, { inverse }));
  } catch (err) {
    await ctx.pool.query('UPDATE action_plans SET execution_id = NULL WHERE id = $1', [planId]);
    throw err;
  }
  await ctx.pool.query('INSERT INTO action_executions (id, project_id, plan_id, action_id, status) VALUES ($1, $2, $3, $4, $5)', [
    executionId,
    project.id,
    planId,
    s.id,
    'started',
  ]);
  return executionId;
}

/** The effects, then the verification; a failed verification is reported, never undone silently. */
async function runExecution({ ctx, env, s, row, planId, project, actor }: Applying, executionId: string): Promise<ActionExecution> {
  let effects: ObservedEffect[];
  try {
    effects = await s.apply!(env, row.planned, executionId);
  } catch (err) {
    const message = scrub((err as Error).message, secretsOf(row.parameters));
    appendJournal(project.path, entry(ctx, 'failed', project, s, row, actor, executionId, { error: message }));
    await setStatus(ctx, executionId, 'failed');
    throw new AtelierError(
      err instanceof AtelierError ? err.code : 'INTERNAL',
      `${s.id} failed while applying: ${message}; its inverse is offered: atelier actions rollback ${executionId}`,
      {
        executionId,
      },
    );
  }
  appendJournal(project.path, entry(ctx, 'effects', project, s, row, actor, executionId, { effects }));
  const verification = await s.verify!(env, row.planned);
  appendJournal(project.path, entry(ctx, 'verification', project, s, row, actor, executionId, { verification }));
  const status = verification.ok ? 'applied' : 'failed';
  appendJournal(project.path, entry(ctx, status, project, s, row, actor, executionId));
  await setStatus(ctx, executionId, status);
  return scrub(
    {
      executionId,
      planId,
      actionId: s.id,
      project: project.name,
      status,
      effects,
      verification,
      rollbackOffered: true,
      message: verification.ok
        ? `${s.id} applied and verified; undo with \`atelier actions rollback ${executionId}\``
        : `${s.id} was applied but its verification failed; it was NOT undone: undo with \`atelier actions rollback ${executionId}\``,
    },
    secretsOf(row.parameters),
  );
}
