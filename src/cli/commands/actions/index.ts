import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier actions …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const actions = program.command('actions').description('typed infrastructure actions on a project: list, plan, apply, rollback, journal');
  actions
    .command('list')
    .description('the catalog: id, class, parameters and preconditions evaluated now')
    .requiredOption('--project <project>', 'project name or id')
    .action(async (flags: { project: string }) => {
      const c = cli.ctx();
      const { listActions } = await import('./run.js');
      const { catalogTable } = await import('./render.js');
      const items = await listActions(c, flags.project);
      await cli.render(c.output, items, () => catalogTable(items));
    });
  actions
    .command('plan <action>')
    .description('show the full ordered plan (diffs, commands, services) without changing anything')
    .requiredOption('--project <project>', 'project name or id')
    .option('--param <key=value...>', 'a parameter (repeatable); a value starting with [ or { is JSON', [])
    .action(async (action: string, flags: { project: string; param: string[] }) => {
      const c = cli.ctx();
      const { planAction } = await import('./run.js');
      const { planText } = await import('./render.js');
      const p = await planAction(c, action, flags.project, flags.param);
      await cli.render(c.output, p, () => planText(p));
    });
  actions
    .command('apply <plan-id>')
    .description('apply exactly that plan (after confirmation), verify it, and journal it')
    .option('-y, --yes', 'do not ask for confirmation')
    .action(async (planId: string, flags: { yes?: boolean }) => {
      const c = cli.ctx();
      const { getPlan, applyPlan } = await import('./run.js');
      const { planText, executionText } = await import('./render.js');
      const plan = await getPlan(c, planId);
      if (!flags.yes) {
        const { AtelierError } = await import('../../../core/index.js');
        if (!process.stdin.isTTY)
          throw new AtelierError('INVALID_ARGUMENT', 'no terminal to confirm in: review the plan, then pass --yes', { field: 'yes' });
        process.stderr.write(`${planText(plan)}\n\n`);
        const { createInterface } = await import('node:readline/promises');
        const rl = createInterface({ input: process.stdin, output: process.stderr });
        const answer = await rl.question('Apply this plan? [y/N] ');
        rl.close();
        if (!/^y(es)?$/i.test(answer.trim())) {
          process.stderr.write('not applied\n');
          cli.setExitCode(1);
          return;
        }
      }
      const x = await applyPlan(c, plan);
      await cli.render(c.output, x, () => executionText(x));
      if (x.status !== 'applied') cli.setExitCode(1);
    });
  actions
    .command('rollback <execution-id>')
    .description('apply the inverse recorded in the journal for that execution, and verify it')
    .action(async (executionId: string) => {
      const c = cli.ctx();
      const { rollbackExecution } = await import('./run.js');
      const { executionText } = await import('./render.js');
      const x = await rollbackExecution(c, executionId);
      await cli.render(c.output, x, () => executionText(x));
      if (x.status !== 'rolled_back') cli.setExitCode(1);
    });
  actions
    .command('journal')
    .description("the project's actions journal: executions, their status, interrupted ones, what can be rolled back")
    .requiredOption('--project <project>', 'project name or id')
    .action(async (flags: { project: string }) => {
      const c = cli.ctx();
      const { readActionJournal } = await import('./run.js');
      const { journalText } = await import('./render.js');
      const j = await readActionJournal(c, flags.project);
      await cli.render(c.output, j, () => journalText(j));
    });
}
