import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier simulators …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const sims = program
    .command('simulators')
    .alias('sims')
    .description("a workshop's throwaway services (postgres, redis…), reachable inside it at <name>.atelier.internal");
  sims
    .command('list <id>')
    .alias('ls')
    .description('each simulator: state, endpoint inside the workshop, memory')
    .action(async (id: string) => {
      const c = cli.ctx();
      const { listSimulators, simulatorTable } = await import('./manage.js');
      const items = await listSimulators(c, id);
      await cli.render(c.output, items, () => simulatorTable(items));
    });
  sims
    .command('request <id> <type>')
    .description('start one more simulator in a running workshop (reachable at once, no restart)')
    .option('--name <name>', 'its name inside the workshop (default: the type, e.g. postgres.atelier.internal)')
    .option('--version <version>', 'major version wanted (refused clearly when not installed)')
    .option(
      '--env <KEY=VALUE>',
      'container-style setting (repeatable), e.g. POSTGRES_DB=orders',
      (v: string, a: string[]) => [...a, v],
      [] as string[],
    )
    .option(
      '--option <key=value>',
      'type-specific option (repeatable), e.g. database=orders_test or superuser=true (read as the type takes it)',
      (v: string, a: string[]) => [...a, v],
      [] as string[],
    )
    .action(async (id: string, type: string, flags) => {
      const c = cli.ctx();
      const { requestSimulator, simulatorDetail } = await import('./manage.js');
      const s = await requestSimulator(c, id, type, flags as Record<string, never>);
      await cli.render(c.output, s, () => simulatorDetail(s));
      if (s.status === 'Failed') cli.setExitCode(1);
    });
  sims
    .command('logs <id> <name>')
    .description("the end of a simulator's own log")
    .option('--tail <bytes>', 'how much of the end to show (default 64 KiB)')
    .action(async (id: string, name: string, flags: { tail?: string }) => {
      const c = cli.ctx();
      const { simulatorLogs } = await import('./manage.js');
      process.stdout.write(await simulatorLogs(c, id, name, flags.tail));
    });
  sims
    .command('reset <id> <name>')
    .description('return a simulator to its initial state (fresh database, no keys); starts a stopped or failed one again')
    .action(async (id: string, name: string) => {
      const c = cli.ctx();
      const { resetSimulator, simulatorDetail } = await import('./manage.js');
      const s = await resetSimulator(c, id, name);
      await cli.render(c.output, s, () => simulatorDetail(s));
    });
  sims
    .command('stop <id> <name>')
    .description('stop a simulator (its files kept) until `simulators reset` starts it again')
    .action(async (id: string, name: string) => {
      const c = cli.ctx();
      const { stopSimulator, simulatorDetail } = await import('./manage.js');
      const s = await stopSimulator(c, id, name);
      await cli.render(c.output, s, () => simulatorDetail(s));
    });
}
