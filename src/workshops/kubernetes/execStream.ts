import { PassThrough, Writable } from 'node:stream';
import type WebSocket from 'ws';
import type { KubeConnection } from './client.js';
import { openPodStream } from './podStream.js';

/**
 * A streaming `pods/exec` through the API server (the `v5.channel.k8s.io` WebSocket protocol:
 * each binary message starts with its channel; 0 stdin, 1 stdout, 2 stderr, 3 the closing
 * Status, 4 a terminal resize as `{"Width":…,"Height":…}`, 255 a close signal whose byte names
 * the channel closed, which v5 added so that stdin can end while the output goes on).
 *
 * **The workshop's environment never goes on the exec's command line**: the command line is in
 * the API server's audit log (the request URL) and in `ps` in the pod, and the environment
 * carries ATELIER_TOKEN and granted secrets. When there are variables (or a working directory),
 * the command runs under a small `sh` preamble (`PREAMBLE`) that reads them from the exec's stdin
 * before anything else, one `export NAME='value'` line each (single-quoted: the shell parses
 * nothing inside; a quote becomes `'\''`, a newline `'"$N"'`, so a value never spans lines), up
 * to a line `.`, then `exec`s the command, whose stdin is what follows. Names are checked against
 * a shell name's pattern here, so the evaluated line is only ever an assignment. With a TTY the
 * pod's terminal would echo that block back and cook it (line length, CR/LF): the preamble first
 * puts its terminal in raw mode without echo, prints `READY` (an OSC sequence a terminal
 * ignores, swallowed here anyway), and only then is the block sent; the terminal's settings are
 * restored before the command starts. So a TTY with variables needs `stty` in the image.
 */

/** Names the handover can carry (a shell variable's). */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** What the preamble prints, in TTY mode, once its terminal no longer echoes. */
const READY = '\x1b]7777;atelier-env\x07';
/** `sh -c PREAMBLE sh <tty|pipe> <cwd or ''> command…` */
export const PREAMBLE = [
  "N='\n'",
  `if [ "$1" = tty ]; then s=$(stty -g) && stty raw -echo || exit 125; printf '\\033]7777;atelier-env\\007'; fi`,
  'while :; do IFS= read -r l || exit 125; [ "$l" = . ] && break; eval "$l"; done',
  'if [ "$1" = tty ]; then stty "$s"; fi',
  'if [ -n "$2" ]; then cd -- "$2" || exit 126; fi',
  'shift 2',
  'exec "$@"',
].join('\n');

/** The block the preamble reads: one `export NAME='value'` line per variable, then `.`. */
export function envBlock(env: Record<string, string>): Buffer {
  const lines = Object.entries(env).map(([name, value]) => {
    if (!ENV_NAME.test(name))
      throw new Error(`environment variable ${JSON.stringify(name)}: not a shell variable name, cannot be handed over`);
    return `export ${name}='${value.replaceAll("'", `'\\''`).replaceAll('\n', `'"$N"'`)}'`;
  });
  return Buffer.from([...lines, '.', ''].join('\n'));
}

export interface PodExecStreamOptions {
  namespace: string;
  pod: string;
  container: string;
  command: string[];
  /** A terminal in the pod: stdout and stderr are one stream, `resize` applies. */
  tty?: boolean;
  /** Handed over through stdin, never on the command line (above). */
  env?: Record<string, string>;
  /** Where the command starts (the container's working directory when unset). */
  cwd?: string;
}

/** How the command ended: its exit code, or why no exit code came. */
export type PodExecExit = { exitCode: number } | { error: string };

export interface PodExecStream {
  /** The command's stdin: `end()` sends the close signal (the command reads EOF). */
  stdin: Writable;
  stdout: PassThrough;
  /** Empty with a TTY (the terminal merges both). */
  stderr: PassThrough;
  /** Sets the pod's terminal size (TTY mode). */
  resize(width: number, height: number): void;
  /** Settles when the stream closes: the exit code from the Status, or why there is none. Never rejects. */
  exit: Promise<PodExecExit>;
  /** Closes the stream now (the command is not waited for). */
  close(): void;
}

interface ExecStatus {
  status?: string;
  message?: string;
  reason?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}

/** The exit code the closing Status carries (`Success`, or `NonZeroExitCode` with its `ExitCode` cause), or its message. */
export function exitOf(status: ExecStatus | undefined): PodExecExit {
  if (!status) return { error: 'the stream closed without an exit status (the connection was lost, or the command was cut off)' };
  if (status.status === 'Success') return { exitCode: 0 };
  const code = status.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
  if (status.reason === 'NonZeroExitCode' && code !== undefined && /^\d+$/.test(code)) return { exitCode: Number(code) };
  return { error: status.message ?? status.reason ?? 'failed' };
}

/** The argv the exec request carries: the command itself, or the preamble and the command (no value of `env` in it). */
export function execArgv(opts: PodExecStreamOptions): string[] {
  const handover = (opts.env && Object.keys(opts.env).length > 0) || opts.cwd;
  return handover ? ['sh', '-c', PREAMBLE, 'sh', opts.tty ? 'tty' : 'pipe', opts.cwd ?? '', ...opts.command] : opts.command;
}

/** Starts `command` in the pod's container with its streams piped; rejects when the API server refuses (PodStreamError). */
export async function podExecStream(connection: KubeConnection, opts: PodExecStreamOptions): Promise<PodExecStream> {
  const argv = execArgv(opts);
  const block = argv === opts.command ? undefined : envBlock(opts.env ?? {});
  const query: [string, string][] = argv.map((a) => ['command', a]);
  query.push(['container', opts.container], ['stdin', 'true'], ['stdout', 'true'], ['stderr', opts.tty ? 'false' : 'true']);
  if (opts.tty) query.push(['tty', 'true']);
  // v5 only: without its close signal stdin could not end before the command does.
  const ws = await openPodStream(connection, opts.namespace, opts.pod, 'exec', query, ['v5.channel.k8s.io']);
  if (ws.protocol !== 'v5.channel.k8s.io') {
    ws.terminate();
    throw new Error(
      `pods/exec ${opts.namespace}/${opts.pod}: the API server does not speak v5.channel.k8s.io (Kubernetes 1.30 or newer needed)`,
    );
  }
  return attach(ws, block, !!opts.tty);
}

function attach(ws: WebSocket, block: Buffer | undefined, tty: boolean): PodExecStream {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let status: ExecStatus | undefined;
  // Before the handover is through (in TTY mode: before the preamble says its terminal is quiet),
  // the caller's stdin waits.
  let release!: () => void;
  const handedOver = new Promise<void>((r) => (release = r));
  let pending = tty && block ? Buffer.alloc(0) : undefined;
  const send = (channel: number, data: Buffer, cb?: (err?: Error) => void) => {
    if (ws.readyState !== ws.OPEN) return cb?.(new Error('the exec stream is closed'));
    ws.send(Buffer.concat([Buffer.from([channel]), data]), cb);
  };
  if (block && !tty) send(0, block);
  if (!block || !tty) release();

  const toOut = (target: PassThrough, data: Buffer) => {
    // Backpressure: stop reading the WebSocket while the reader is behind.
    if (!target.write(data)) {
      ws.pause();
      target.once('drain', () => ws.resume());
    }
  };
  ws.on('message', (msg: Buffer) => {
    const channel = msg[0];
    const body = msg.subarray(1);
    if (channel === 1) {
      if (pending) {
        pending = Buffer.concat([pending, body]);
        const at = pending.indexOf(READY);
        if (at < 0) return;
        // Nothing but the marker comes before it (the preamble prints nothing else first).
        const rest = pending.subarray(at + READY.length);
        pending = undefined;
        send(0, block!);
        release();
        if (rest.length > 0) toOut(stdout, rest);
        return;
      }
      toOut(stdout, body);
    } else if (channel === 2) toOut(stderr, body);
    else if (channel === 3 && body.length > 0) {
      try {
        status = JSON.parse(body.toString('utf8')) as ExecStatus;
      } catch {
        status = { message: body.toString('utf8').slice(0, 500) };
      }
    }
  });

  const stdin = new Writable({
    write(chunk: Buffer, _enc, cb) {
      void handedOver.then(() => send(0, chunk, cb));
    },
    final(cb) {
      void handedOver.then(() => send(255, Buffer.from([0]), () => cb()));
    },
  });
  // A closed exec stream makes writes fail: that is the command gone, not the caller's error.
  stdin.on('error', () => undefined);

  const exit = new Promise<PodExecExit>((resolve) => {
    ws.once('close', () => {
      // A TTY's output held back waiting for the marker (the preamble failed before it): shown.
      if (pending && pending.length > 0) stdout.write(pending);
      stdout.end();
      stderr.end();
      stdin.destroy();
      resolve(exitOf(status));
    });
    ws.on('error', () => undefined);
  });
  return {
    stdin,
    stdout,
    stderr,
    resize(width, height) {
      send(4, Buffer.from(JSON.stringify({ Width: width, Height: height })));
    },
    exit,
    close() {
      ws.close();
    },
  };
}
