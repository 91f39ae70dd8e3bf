import type { Command } from 'commander';
import type { CommandContext } from '../../context.js';

/**
 * Terminals and tunnels: `ssh`, `run`, `attach`, `port-forward`, `config-ssh`, `code`.
 * `setExit` sets the process's exit code (a command's own, for ssh and run).
 */
export function registerTerminalCommands(program: Command, ctx: () => CommandContext, setExit: (code: number) => void): void {
  program
    .command('ssh <id> [command...]')
    .description('an interactive shell in a workshop (a real terminal); with -- CMD, runs one command on a terminal; exits with its code')
    .option('--no-resume', 'refuse instead of resuming a suspended workshop')
    .action(async (id: string, command: string[], flags: { resume: boolean }) => {
      const { sshCommand } = await import('./shell.js');
      setExit(await sshCommand(ctx(), id, command, flags));
    });

  program
    .command('run [id] [command...]')
    .description("start the project's agent (atelier.yaml `agent:`) or -- CMD in a session that survives this client, and attach")
    .option('--repo <path|url>', 'create a workshop from this repository first')
    .option('--name <name>', 'name of the workshop created with --repo')
    .option('--session <name>', 'session name (default: agent)')
    .option('-d, --detach', 'start it and return, without attaching')
    .option('--attach', 'attach to the running session instead of starting one')
    .option('--no-resume', 'refuse instead of resuming a suspended workshop')
    .action(async (id: string | undefined, command: string[], flags) => {
      const { runAgent } = await import('../run/session.js');
      setExit(await runAgent(ctx(), id, command, flags as { resume: boolean }));
    });

  program
    .command('attach <id>')
    .description("reattach to a workshop's agent session, with its recent output; Ctrl-] detaches")
    .option('--session <name>', 'session name (default: agent)')
    .option('--no-resume', 'refuse instead of resuming a suspended workshop')
    .action(async (id: string, flags: { session?: string; resume: boolean }) => {
      const { attachSession } = await import('../run/session.js');
      setExit(await attachSession(ctx(), id, flags));
    });

  program
    .command('port-forward [id] [ports...]')
    .description('forward local ports to ports inside a workshop (LOCAL:REMOTE or PORT; none: its forwardPorts); --list, --stdio ID PORT')
    .option('--list', 'show the forwards running on this machine and their health')
    .option('--stdio', 'relay standard input and output to ID PORT (for an ssh ProxyCommand)')
    .option('--address <ip>', 'local address to listen on', '127.0.0.1')
    .option('--no-resume', 'refuse instead of resuming a suspended workshop')
    .action(
      async (id: string | undefined, ports: string[], flags: { list?: boolean; stdio?: boolean; address: string; resume: boolean }) => {
        const { AtelierError } = await import('../../../core/index.js');
        const f = await import('../port-forward/forward.js');
        const c = ctx();
        if (flags.list) {
          const { render } = await import('../../output.js');
          const items = f.listForwards(c);
          await render(c.output, items, () => f.forwardsTable(items));
          return;
        }
        if (!id) throw new AtelierError('INVALID_ARGUMENT', 'give a workshop ID, for example: atelier port-forward ws-1234abcd 8080:3000');
        if (flags.stdio) {
          if (ports.length !== 1)
            throw new AtelierError('INVALID_ARGUMENT', 'with --stdio give one remote port: atelier port-forward --stdio ID PORT');
          setExit(await f.portForwardStdio(c, id, ports[0]!, flags));
          return;
        }
        setExit(await f.portForward(c, id, ports, flags));
      },
    );

  program
    .command('config-ssh')
    .description('write a managed block in ~/.ssh/config with a Host atelier-<id> per workshop (idempotent); --remove takes it out')
    .option('--remove', 'remove the managed block (your own lines stay)')
    .action(async (flags: { remove?: boolean }) => {
      const c = ctx();
      const { configSsh } = await import('../config-ssh/manage.js');
      const { render } = await import('../../output.js');
      const r = await configSsh(c, flags);
      await render(c.output, r, () =>
        flags.remove
          ? r.removed
            ? `removed Atelier's block from ${r.file}`
            : `${r.file} has no Atelier block`
          : `${r.file}: ${r.hosts.length} host(s)${r.hosts.length ? `: ${r.hosts.join(', ')}` : ''} (try: ssh ${r.hosts[0] ?? 'atelier-<id>'})`,
      );
    });

  program
    .command('code <id>')
    .description('open VS Code (or Cursor) on the workshop over Remote-SSH (writes the SSH config first)')
    .option('--editor <name>', 'code or cursor', 'code')
    .action(async (id: string, flags: { editor: string }) => {
      const { openEditor } = await import('../code/open.js');
      await openEditor(ctx(), id, flags);
    });
}
