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
    .option('--email <address>', 'the address their Slack account shows (Slack decisions are matched by it)')
    .action(async (name: string, flags: { role?: string; tenant?: string; email?: string }) => {
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
    .command('edit <name>')
    .description("change a local account's e-mail address, which Slack decisions are matched by (server admins)")
    .option('--email <address>', 'the address their Slack account shows')
    .option('--no-email', 'remove the address (their Slack clicks are then refused)')
    .action(async (name: string, flags: { email?: string | false }) => {
      const c = cli.ctx();
      const { editUser, userText } = await import('./manage.js');
      const u = await editUser(c, name, flags);
      await cli.render(c.output, u, () => userText(u));
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
