import { AtelierError } from '../../core/index.js';
import { appendJournal, readJournal } from '../journal.js';
import { scrub, secretsOf } from '../redact.js';
import type { Actor, ObservedEffect, Verification } from '../types.js';
import { entry, setStatus, spec, withProjectLock, type EngineContext, type PlanRow } from './context.js';
import { execution } from './journalAccess.js';
import type { ActionExecution } from './model.js';

/** Runs the inverse the journal holds for an execution, then verifies it, all in the journal. */
export async function rollback(ctx: EngineContext, actor: Actor, actionId: string, executionId: string): Promise<ActionExecution> {
  const s = spec(actionId);
  const found = await execution(ctx, actor, executionId);
  if (found.actionId !== s.id)
    throw new AtelierError('EXECUTION_NOT_FOUND', `execution ${executionId} is an execution of ${found.actionId}, not of ${s.id}`, {
      executionId,
    });
  const project = await ctx.projects.resolve(actor, found.project);
  if (!s.rollback) throw new AtelierError('UNSUPPORTED', `${s.id} has nothing to roll back`, { action: s.id });
  return withProjectLock(ctx, project, async () => {
    // The journal, not the database, is the source of the inverse (read again under the lock).
    const ex = readJournal(project.path).executions.find((e) => e.executionId === executionId);
    if (!ex || !ex.inverse)
      throw new AtelierError('EXECUTION_NOT_FOUND', `execution ${executionId} is not in the journal of ${project.name}`, {
        executionId,
      });
    if (ex.status === 'rolled_back')
      throw new AtelierError('CONFLICT', `execution ${executionId} was already rolled back`, { executionId });
    const row = { id: ex.planId, fingerprint: '', parameters: {} as Record<string, unknown> };
    const plan = await ctx.pool.query<PlanRow>('SELECT * FROM action_plans WHERE id = $1', [ex.planId]);
    if (plan.rows[0]) Object.assign(row, { fingerprint: plan.rows[0].fingerprint, parameters: plan.rows[0].parameters });
    appendJournal(project.path, entry(ctx, 'rollback_started', project, s, row, actor, executionId, { inverse: ex.inverse }));
    let result: { effects: ObservedEffect[]; verification: Verification };
    try {
      result = await s.rollback!(ctx.envOf(project), ex.inverse);
    } catch (err) {
      appendJournal(project.path, entry(ctx, 'rollback_failed', project, s, row, actor, executionId, { error: (err as Error).message }));
      await setStatus(ctx, executionId, 'rollback_failed');
      throw err;
    }
    appendJournal(project.path, entry(ctx, 'effects', project, s, row, actor, executionId, { effects: result.effects }));
    appendJournal(project.path, entry(ctx, 'verification', project, s, row, actor, executionId, { verification: result.verification }));
    const status = result.verification.ok ? 'rolled_back' : 'rollback_failed';
    appendJournal(
      project.path,
      entry(ctx, status === 'rolled_back' ? 'rollback_applied' : 'rollback_failed', project, s, row, actor, executionId),
    );
    await setStatus(ctx, executionId, status);
    return scrub(
      {
        executionId,
        planId: ex.planId,
        actionId: s.id,
        project: project.name,
        status,
        effects: result.effects,
        verification: result.verification,
        rollbackOffered: status !== 'rolled_back',
        message:
          status === 'rolled_back' ? `${s.id} rolled back and verified` : `the rollback of ${executionId} did not verify: see the journal`,
      },
      secretsOf(row.parameters),
    );
  });
}
