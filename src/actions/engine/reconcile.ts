import { existsSync } from 'node:fs';
import { restartPolicy, STACKS } from '../stacks.js';
import type { EngineContext } from './context.js';

/** At server start: every stack that should run (`restart: unless-stopped`, not stopped on purpose) is started again. */
export async function reconcileStacks(ctx: EngineContext, log: (message: string) => void): Promise<void> {
  const all = await ctx.pool.query<{ id: string }>('SELECT id FROM projects');
  for (const { id } of all.rows) {
    const project = await ctx.projects.byId(id);
    if (!project || !existsSync(project.path)) continue;
    for (const stack of STACKS) {
      try {
        if (!(await ctx.stacks.reconcile(project, stack, restartPolicy(project, stack)))) continue;
        log(`stack ${stack} of project ${project.name} started again (restart: unless-stopped)`);
      } catch (err) {
        log(`stack ${stack} of project ${project.name} could not be started again: ${(err as Error).message}`);
      }
    }
  }
}
