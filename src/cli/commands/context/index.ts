import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier context …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const context = program.command('context').description('servers this CLI talks to: add, use, list, current, remove');
  context
    .command('add <name>')
    .description('add a server context (log in with `atelier auth login --context NAME`, or give an API token on stdin)')
    .requiredOption('--url <url>', "the server's URL, for example https://atelier.example.com")
    .option('--tenant <tenant>', 'tenant to act in (default: your first)')
    .option('--token-stdin', 'read an API token from standard input instead of logging in')
    .action(async (name: string, flags: { url: string; tenant?: string; tokenStdin?: boolean }) => {
      const c = cli.ctx();
      const { addContext, contextTable } = await import('./manage.js');
      let token: string | undefined;
      if (flags.tokenStdin) {
        const chunks: Buffer[] = [];
        for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
        token = Buffer.concat(chunks).toString('utf8').trim();
      }
      const r = await addContext(c, name, {
        url: flags.url,
        ...(flags.tenant ? { tenant: flags.tenant } : {}),
        ...(flags.tokenStdin ? { token } : {}),
      });
      await cli.render(c.output, r, () =>
        r.auth === 'oidc' ? `${contextTable([r])}\nlog in with \`atelier auth login --context ${r.name}\`` : contextTable([r]),
      );
    });
  context
    .command('use <name>')
    .description('make a context the current one')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { useContext } = await import('./manage.js');
      const r = await useContext(c, name);
      await cli.render(c.output, r, () => `current context: ${r.current}`);
    });
  context
    .command('list')
    .alias('ls')
    .description('list contexts (* marks the one in use)')
    .action(async () => {
      const c = cli.ctx();
      const { listContexts, contextTable } = await import('./manage.js');
      const rows = await listContexts(c);
      await cli.render(c.output, rows, () => contextTable(rows));
    });
  context
    .command('current')
    .description('show the context in use (--context, then ATELIER_CONTEXT, then the current context)')
    .action(async () => {
      const c = cli.ctx();
      const { currentContext } = await import('./manage.js');
      const r = await currentContext(c);
      await cli.render(c.output, r, () => r.name);
    });
  context
    .command('remove <name>')
    .alias('rm')
    .description('forget a context and its stored credential (nothing is revoked on the server)')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { removeContext } = await import('./manage.js');
      const r = await removeContext(c, name);
      await cli.render(c.output, r, () => `removed context ${r.name}${r.credentialRemoved ? ' and its stored credential' : ''}`);
    });
}
