import { AtelierError } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { asBuffer, eventError, openTerminalSocket, parseEvent, sayResumed, type TerminalSocket } from '../../socket.js';

/** Ctrl-] : detaches from an agent session (like telnet's escape), leaving it running. */
const DETACH_KEY = 0x1d;
/** Above this many bytes queued towards the server, the terminal's input is paused. */
const HIGH_WATER = 1 << 20;

export interface ShellFlags {
  resume: boolean;
}

export type TerminalOutcome = { kind: 'exit'; exitCode: number } | { kind: 'detached' };

function terminalSize(): { cols: number; rows: number } {
  return { cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 };
}

/**
 * Connects this terminal to a PTY WebSocket: raw mode (Ctrl-C, Ctrl-Z, Ctrl-D reach the
 * program as bytes), window size changes, output with backpressure. Resolves with the
 * program's exit code, or `detached` when `detachKey` is allowed and typed.
 */
export function runTerminal(socket: TerminalSocket, opts: { detachable: boolean }): Promise<TerminalOutcome> {
  const ws = socket.ws;
  const stdin = process.stdin;
  const raw = stdin.isTTY === true;
  if (raw) stdin.setRawMode(true);
  const onResize = (): void => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'resize', ...terminalSize() }));
  };
  if (process.stdout.isTTY) process.stdout.on('resize', onResize);
  return new Promise<TerminalOutcome>((resolve, reject) => {
    let outcome: TerminalOutcome | undefined;
    let failure: Error | undefined;
    const onInput = (chunk: Buffer): void => {
      if (opts.detachable && raw && chunk.includes(DETACH_KEY)) {
        outcome = { kind: 'detached' };
        ws.close(1000);
        return;
      }
      ws.send(chunk, { binary: true });
      if (ws.bufferedAmount > HIGH_WATER) {
        stdin.pause();
        const wait = setInterval(() => {
          if (ws.bufferedAmount < HIGH_WATER / 4 || ws.readyState !== ws.OPEN) {
            clearInterval(wait);
            stdin.resume();
          }
        }, 5);
      }
    };
    stdin.on('data', onInput);
    stdin.resume();
    socket.listen((data, isBinary) => {
      if (isBinary) {
        if (!process.stdout.write(asBuffer(data))) {
          ws.pause();
          process.stdout.once('drain', () => ws.resume());
        }
        return;
      }
      let event;
      try {
        event = parseEvent(data);
      } catch (err) {
        failure = err as Error;
        return;
      }
      if (event.type === 'approval') {
        // One line (CR LF: the terminal may be in raw mode) saying what waits and how to approve it.
        process.stderr.write(
          `\r\natelier: waiting for approval of ${event.category}${event.what ? ` ${event.what}` : ''} (request ${event.id}): run \`atelier approve ${event.id}\`\r\n`,
        );
      } else if (event.type === 'exit') outcome = { kind: 'exit', exitCode: event.exitCode };
      else if (event.type === 'error') failure = eventError(event);
    });
    ws.on('error', () => undefined);
    ws.on('close', () => {
      stdin.off('data', onInput);
      stdin.pause();
      if (raw) stdin.setRawMode(false);
      process.stdout.off('resize', onResize);
      if (outcome) resolve(outcome);
      else
        reject(
          failure ??
            new AtelierError(
              'UNAVAILABLE',
              'the connection to the server was lost (server restarted or network down): run the command again',
            ),
        );
    });
  });
}

/** `atelier ssh ID [-- CMD...]`: an interactive shell (or one command) on a PTY in the workshop. */
export async function sshCommand(ctx: CommandContext, id: string, command: string[], flags: ShellFlags): Promise<number> {
  const target = await ctx.target();
  const start = {
    type: 'start',
    ...terminalSize(),
    ...(command.length > 0 ? { command } : {}),
    ...(ctx.config.term && /^[A-Za-z0-9._+-]{1,64}$/.test(ctx.config.term) ? { term: ctx.config.term } : {}),
  };
  const socket = await openTerminalSocket(target, `/v1/workshops/${encodeURIComponent(id)}/pty?resume=${flags.resume}`, { start });
  sayResumed(id, socket.first);
  const outcome = await runTerminal(socket, { detachable: false });
  return outcome.kind === 'exit' ? outcome.exitCode : 0;
}
