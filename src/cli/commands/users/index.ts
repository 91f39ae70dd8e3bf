import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier users …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const users = program.command('users').description('local accounts of the embedded issuer (admin)');
  users
    .command('add <name>')
    .description('create a user; prints a temporary password, to be changed at the first login')
    .option('--role <role>', 'viewer, member, maintainer or admin (default member)')
    .option('--tenant <tenant>', 'tenant to add the user to (default: the current one)')
    .action(async (name: string, flags: { role?: string; tenant?: string }) => {
      const c = cli.ctx();
      const { addUser, addedUserText } = await import('./manage.js');
      const r = await addUser(c, name, flags);
      await cli.render(c.output, r, () => addedUserText(r));
    });
  users
    .command('list')
    .alias('ls')
    .description('list users')
    .action(async () => {
      const c = cli.ctx();
      const { listUsers, userTable } = await import('./manage.js');
      const items = await listUsers(c);
      await cli.render(c.output, items, () => userTable(items));
    });
  users
    .command('disable <name>')
    .description('disable a user: no more logins, and their sessions stop refreshing')
    .action(async (name: string) => {
      const c = cli.ctx();
      const { disableUser, userText } = await import('./manage.js');
      const u = await disableUser(c, name);
      await cli.render(c.output, u, () => userText(u));
    });
}
