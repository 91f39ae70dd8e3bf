import type { Command } from 'commander';
import type { CreatePhaseEvent } from '../../../core/index.js';
import type { Cli } from '../../cli.js';

/** `atelier workshops …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const ws = program.command('workshops').alias('ws').description('create, list, suspend, resume and delete workshops');
  ws.command('create')
    .description('clone a repository into a new sandbox and start it')
    .requiredOption('--repo <path|url>', 'local path, file://, https://, ssh:// or git@host:path')
    .option('--name <name>', 'unique name (default: from the repository)')
    .option('--devcontainer <path>', 'devcontainer.json inside the repository (default: .devcontainer/devcontainer.json)')
    .option('--budget <usd>', 'LLM budget in USD, enforced by the LLM gateway (and exported as ATELIER_MAX_BUDGET_USD)')
    .option('--cpus <n>', 'CPU limit (cores)')
    .option('--memory <size>', 'memory limit, for example 2g')
    .option('--pids <n>', 'process limit')
    .option(
      '--disk <size>',
      "disk quota for everything it writes (workspace, /tmp, home, simulators), for example 20g (default: the server's)",
    )
    .option('--node <name>', 'the node to run it on (`atelier nodes list`; default: the least loaded accepting node)')
    .option(
      '--simulator <type[:arg]>',
      'start a simulator with it (repeatable): postgres, postgres:15, redis, wiremock:./tests/mocks',
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .action(async (flags) => {
      const c = cli.ctx();
      const { createWorkshop } = await import('./create.js');
      const { workshopDetail } = await import('./render.js');
      // Its phases as they happen (stderr), unless the output is for a program (json, yaml).
      let printer: { onPhase(e: CreatePhaseEvent): void; close(): void } | undefined;
      if (c.output === 'table') {
        const { createPhasePrinter } = await import('./phases.js');
        printer = createPhasePrinter(process.stderr);
      }
      let w;
      try {
        w = await createWorkshop(c, flags as { repo: string }, printer?.onPhase);
      } finally {
        printer?.close();
      }
      await cli.render(c.output, w, () => workshopDetail(w));
      if (w.status === 'Failed') {
        process.stderr.write(
          `error: workshop ${w.id} failed: ${w.statusReason ?? 'unknown reason'}; remove it with \`atelier workshops delete ${w.id}\`\n`,
        );
        cli.setExitCode(1);
      }
    });
  ws.command('budget <id> <usd>')
    .description('set the LLM budget (USD, or `none`): model requests are refused once the spend reaches it')
    .action(async (id: string, usd: string) => {
      const c = cli.ctx();
      const { setWorkshopBudget } = await import('./budget.js');
      const { workshopDetail } = await import('./render.js');
      const w = await setWorkshopBudget(c, id, usd);
      await cli.render(c.output, w, () => workshopDetail(w));
    });
  ws.command('publish <id>')
    .description('ask to publish the workspace as a branch: once approved, the server commits it and pushes (never the agent)')
    .requiredOption('--branch <name>', 'the branch to push, e.g. feature/login')
    .option('--remote <url|path>', 'where to push (default: the repository the workshop was cloned from)')
    .option('--title <text>', 'the commit message')
    .option('--justification <text>', 'why (shown to the decider)')
    .action(async (id: string, flags: { branch: string; remote?: string; title?: string; justification?: string }) => {
      const c = cli.ctx();
      const { publishWorkshop } = await import('./publish.js');
      const { approvalDetail } = await import('../approvals/manage.js');
      const a = await publishWorkshop(c, id, flags);
      await cli.render(c.output, a, () => approvalDetail(a));
    });
  ws.command('list')
    .alias('ls')
    .description('list workshops')
    .action(async () => {
      const c = cli.ctx();
      const { listWorkshops } = await import('./lifecycle.js');
      const { workshopTable } = await import('./render.js');
      const items = await listWorkshops(c);
      await cli.render(c.output, items, () => workshopTable(items));
    });
  for (const [verb, fn, help] of [
    ['status', 'workshopStatus', 'show one workshop'],
    ['stop', 'stopWorkshop', 'suspend a workshop (its processes are frozen, nothing is lost)'],
    ['resume', 'resumeWorkshop', 'resume a suspended workshop exactly as it was, or start a dead one again (files kept)'],
  ] as const) {
    ws.command(`${verb} <id>`)
      .description(help)
      .action(async (id: string) => {
        const c = cli.ctx();
        const mod = await import('./lifecycle.js');
        const { workshopDetail } = await import('./render.js');
        const w = await mod[fn](c, id);
        await cli.render(c.output, w, () => workshopDetail(w));
      });
  }
  ws.command('egress <id>')
    .description("what the workshop's egress proxy allowed and denied (time, host, port, why)")
    .option('--follow', 'keep printing decisions as they are made (Ctrl-C to stop)')
    .option('--limit <n>', 'how many of the last decisions to show first (default 100)')
    .action(async (id: string, flags: { follow?: boolean; limit?: string }) => {
      const c = cli.ctx();
      const { listEgress, followEgress, egressTable, egressLine } = await import('./egress.js');
      if (!flags.follow) {
        const items = await listEgress(c, id, flags);
        await cli.render(c.output, items, () => egressTable(items));
        return;
      }
      await followEgress(c, id, flags, (d) => {
        process.stdout.write(c.output === 'table' ? `${egressLine(d)}\n` : `${JSON.stringify(d)}\n`);
      });
    });
  ws.command('delete <id>')
    .alias('rm')
    .description('delete a workshop and everything it owned')
    .action(async (id: string) => {
      const c = cli.ctx();
      const { deleteWorkshop } = await import('./lifecycle.js');
      const r = await deleteWorkshop(c, id);
      await cli.render(c.output, r, () => `deleted ${r.id}`);
    });
}
