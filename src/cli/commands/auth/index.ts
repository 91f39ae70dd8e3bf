import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier auth …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  const auth = program.command('auth').description('log in to the server of a context, show who you are, log out');
  auth
    .command('login')
    .description('log in with your browser (OAuth device flow); the session is stored for the context and refreshes by itself')
    .option('--no-browser', 'only print the URL and the code, do not open a browser')
    .action(async (flags: { browser: boolean }) => {
      const c = cli.ctx();
      const { login } = await import('./login.js');
      const { keyValues } = await import('../../output.js');
      const r = await login(c, {
        browser: flags.browser,
        say: (line) => process.stderr.write(`${line}\n`),
        // A browser can only open in a graphical session (this is a terminal-side fact, not configuration).
        canOpenBrowser: cli.config.canOpenBrowser,
      });
      if (r === 'cancelled') {
        process.stderr.write('login cancelled: nothing was saved\n');
        // The poll may sleep for seconds before it notices; nothing is left to finish.
        process.exit(130);
      }
      await cli.render(c.output, r, () =>
        keyValues([
          ['logged in as', r.user],
          ['tenant', r.tenant],
          ['role', r.role],
          ['context', r.context],
          ['expires', r.expiresAt ?? 'unknown (refreshed automatically)'],
        ]),
      );
    });
  auth
    .command('status')
    .description('show the user, tenant, role and token expiry of the current context')
    .action(async () => {
      const c = cli.ctx();
      const { authStatus, statusText } = await import('./status.js');
      const s = await authStatus(c);
      await cli.render(c.output, s, () => statusText(s));
    });
  auth
    .command('logout')
    .description('revoke the session at the issuer and remove it from this machine (also when the server is down)')
    .action(async () => {
      const c = cli.ctx();
      const { logout } = await import('./logout.js');
      const r = await logout(c);
      await cli.render(c.output, r, () => r.note);
    });
}
