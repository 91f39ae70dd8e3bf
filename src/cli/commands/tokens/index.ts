import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier tokens …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const tokens = program.command('tokens').description('API tokens for automation: create, list, revoke');
  tokens
    .command('create')
    .description('create an API token (shown once)')
    .option('--name <name>', 'a name to recognise it by')
    .option('--scope <role>', 'viewer, member, maintainer or admin; at most your own role (default: your role)')
    .option('--expires <duration>', 'lifetime such as 12h, 30d, 1y, or "never"')
    .option('--workshop <id>', 'an agent token that can act only for this workshop')
    .option('--user <name>', 'for another user of the tenant, such as a service account (admins only)')
    .option('--tenant <name>', 'for another tenant you belong to (default: the current one)')
    .action(async (flags: { name?: string; scope?: string; expires?: string; workshop?: string; user?: string; tenant?: string }) => {
      const c = cli.ctx();
      const { createToken, createdTokenText } = await import('./manage.js');
      const t = await createToken(c, flags);
      await cli.render(c.output, t, () => createdTokenText(t));
    });
  tokens
    .command('list')
    .alias('ls')
    .description('list API tokens (never their secret)')
    .action(async () => {
      const c = cli.ctx();
      const { listTokens, tokenTable } = await import('./manage.js');
      const items = await listTokens(c);
      await cli.render(c.output, items, () => tokenTable(items));
    });
  tokens
    .command('revoke <id>')
    .description('revoke an API token: it stops working at once')
    .action(async (id: string) => {
      const c = cli.ctx();
      const { revokeToken } = await import('./manage.js');
      const r = await revokeToken(c, id);
      await cli.render(c.output, r, () => `revoked ${r.id}`);
    });
}
