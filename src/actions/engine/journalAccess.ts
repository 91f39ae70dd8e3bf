import { AtelierError } from '../../core/index.js';
import { readJournal, type ExecutionSummary, type JournalRead } from '../journal.js';
import type { Actor } from '../types.js';
import { ID, type EngineContext } from './context.js';

/** A project's journal, as the caller's tenant may read it. */
export async function journal(ctx: EngineContext, actor: Actor, projectRef: string): Promise<JournalRead & { project: string }> {
  const project = await ctx.projects.resolve(actor, projectRef);
  return { project: project.name, ...readJournal(project.path) };
}

/** One execution of the caller's tenant, as its project's journal tells it. */
export async function execution(ctx: EngineContext, actor: Actor, executionId: string): Promise<ExecutionSummary & { project: string }> {
  const notFound = new AtelierError('EXECUTION_NOT_FOUND', `no execution ${executionId}: see \`atelier actions journal --project P\``, {
    executionId,
  });
  if (typeof executionId !== 'string' || !ID.test(executionId)) throw notFound;
  const r = await ctx.pool.query<{ project_id: string }>('SELECT project_id FROM action_executions WHERE id = $1', [executionId]);
  const project = r.rows[0] ? await ctx.projects.byId(r.rows[0].project_id) : undefined;
  if (!project || project.tenantId !== actor.tenantId) throw notFound;
  const ex = readJournal(project.path).executions.find((e) => e.executionId === executionId);
  if (!ex) throw notFound;
  return { ...ex, project: project.name };
}
