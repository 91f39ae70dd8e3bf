import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier nodes …`: the servers of the installation (docs/replicas.md). */
export function register(program: Command, cli: Cli): void {
  const nodes = program
    .command('nodes')
    .description('the nodes of the installation (every server on one PostgreSQL): list, drain, undrain, remove');
  nodes
    .command('list')
    .alias('ls')
    .description('each node with its address, version, load, workshops, last heartbeat and state')
    .action(async () => {
      const c = cli.ctx();
      const { listNodes, nodeTable } = await import('./manage.js');
      const items = await listNodes(c);
      await cli.render(c.output, items, () => nodeTable(items));
    });
  nodes
    .command('drain <name>')
    .description('no new workshops on this node; those it runs stay (server admins)')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { setDraining } = await import('./manage.js');
      const n = await setDraining(c, name, true);
      await cli.render(c.output, n, () => `node ${n.name} is draining: no new workshops go there (${n.workshops} stay)`);
    });
  nodes
    .command('undrain <name>')
    .description('the node takes new workshops again (server admins)')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { setDraining } = await import('./manage.js');
      const n = await setDraining(c, name, false);
      await cli.render(c.output, n, () => `node ${n.name} takes new workshops again`);
    });
  nodes
    .command('remove <name>')
    .alias('rm')
    .description(
      'take a dead node out of the installation (refused while it is live); its workshops stay listed, deletable (server admins)',
    )
    .action(async (name: string) => {
      const c = cli.ctx();
      const { removeNode, removalText } = await import('./manage.js');
      const r = await removeNode(c, name);
      await cli.render(c.output, r, () => removalText(r));
    });
}
