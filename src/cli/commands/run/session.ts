import { AtelierError, ROUTES, routeUrl, type StartSessionRequest } from '../../../core/index.js';
import { sdkFor } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { openTerminalSocket, sayResumed } from '../../socket.js';
import { createWorkshop } from '../workshops/create.js';
import { runTerminal } from '../ssh/shell.js';

export interface RunFlags {
  repo?: string;
  name?: string;
  session?: string;
  detach?: boolean;
  attach?: boolean;
  resume: boolean;
}

const say = (line: string): void => void process.stderr.write(`atelier: ${line}\n`);

/**
 * `atelier attach ID [--session NAME]`: reattaches this terminal to an agent session, replaying
 * its recent output first. Ctrl-] detaches (the agent goes on); the agent's exit ends it.
 */
export async function attachSession(ctx: CommandContext, id: string, flags: { session?: string; resume: boolean }): Promise<number> {
  const target = await ctx.target();
  const name = flags.session ?? 'agent';
  const socket = await openTerminalSocket(target, routeUrl(ROUTES.attachSession.path, { id, name }, { resume: flags.resume }));
  sayResumed(id, socket.first);
  if (process.stdin.isTTY) say(`attached to session ${name} of ${id}: Ctrl-] detaches (the agent keeps running)`);
  // The session's size follows this terminal while attached.
  if (process.stdout.isTTY)
    socket.ws.send(JSON.stringify({ type: 'resize', cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 }));
  const outcome = await runTerminal(socket, { detachable: true });
  if (outcome.kind === 'detached') {
    process.stdout.write('\r\n');
    say(`detached: the session goes on; \`atelier attach ${id}${name === 'agent' ? '' : ` --session ${name}`}\` comes back to it`);
    return 0;
  }
  return outcome.exitCode;
}

/**
 * `atelier run ID | --repo PATH|URL [-- CMD...]`: starts the project's agent (atelier.yaml
 * `agent:`) or CMD in a session that survives this client, then attaches (unless --detach).
 */
export async function runAgent(ctx: CommandContext, idArg: string | undefined, command: string[], flags: RunFlags): Promise<number> {
  if (idArg && flags.repo) throw new AtelierError('INVALID_ARGUMENT', 'give a workshop ID or --repo, not both');
  let id = idArg;
  if (!id) {
    if (!flags.repo) throw new AtelierError('INVALID_ARGUMENT', 'give a workshop ID, or --repo PATH|URL to create one first');
    const w = await createWorkshop(ctx, { repo: flags.repo, ...(flags.name ? { name: flags.name } : {}) });
    if (w.status !== 'Running')
      throw new AtelierError('SANDBOX_FAILED', `workshop ${w.id} is ${w.status}: ${w.statusReason ?? 'see atelier workshops status'}`);
    say(`created workshop ${w.id} (${w.name})`);
    id = w.id;
  }
  const target = await ctx.target();
  const name = flags.session ?? 'agent';
  if (!flags.attach) {
    const body: StartSessionRequest = { name, resume: flags.resume };
    if (command.length > 0) body.command = command;
    if (process.stdout.isTTY) {
      body.cols = process.stdout.columns || 80;
      body.rows = process.stdout.rows || 24;
    }
    const s = await sdkFor(target).call('startSession', { params: { id }, body });
    if (s.resumed) say(`workshop ${id} was suspended: resumed it (use --no-resume to refuse)`);
    say(`session ${s.name} ${s.running ? 'running' : 'ended'} in ${id}: ${s.command.join(' ')}`);
    if (flags.detach) {
      process.stdout.write(`${id}\n`);
      return 0;
    }
  }
  return attachSession(ctx, id, { session: name, resume: flags.resume });
}
