import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, unlinkSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AtelierError } from '../core/index.js';
import { TerminalOutput, type PtyExit, type Terminal } from './pty.js';

/**
 * Agent sessions held by a process of their own (`session-holder.py`, which says why): the PTY
 * outlives its clients and the server. This side is the server's connection to one holder: it
 * fans the output out to the attached clients (keeping the recent part for the next one), and
 * passes input, resizes, signals and the end on.
 */

const PYTHON = '/usr/bin/python3';
const HOLDER = fileURLToPath(new URL('./session-holder.py', import.meta.url));
/** A holder that has not said "ready" by then is not going to. */
const READY_TIMEOUT_MS = 10_000;
/** Input sent to the holder and not yet read by the program, at most (a paste waits beyond). */
const INPUT_HIGH_WATER = 1 << 20;
/** A unix socket's path is at most this many bytes. */
const MAX_SOCKET_PATH = 107;

/** The holder's frames, as session-holder.py speaks them. */
const PROTOCOL = 1;

export interface HeldMeta {
  protocol: number;
  workshop: string;
  name: string;
  command: string[];
  startedAt: string;
  pid: number;
  cols: number;
  rows: number;
}

/** Where a session's holder listens: a short name (a unix socket path is at most 107 bytes). */
export function holderSocket(dir: string, workshop: string, name: string): string {
  return join(dir, `${createHash('sha256').update(`${workshop}/${name}`).digest('hex').slice(0, 16)}.sock`);
}

/** The sessions directory, only the server's (holders' sockets are its way in). */
export function sessionsDir(dir: string): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  return dir;
}

function header(kind: string, length: number): Buffer {
  const h = Buffer.allocUnsafe(5);
  h.write(kind, 0, 'latin1');
  h.writeUInt32BE(length, 1);
  return h;
}

export class HeldSession extends TerminalOutput implements Terminal {
  readonly workshop: string;
  readonly name: string;
  readonly command: string[];
  readonly startedAt: Date;
  readonly pid: number;
  private pending = Buffer.alloc(0);
  /** Input bytes the holder has not written to the program yet, and who waits for them. */
  private unacked = 0;
  private readonly inputWaiters: (() => void)[] = [];
  private disconnecting = false;

  private constructor(
    private readonly socket: Socket,
    meta: HeldMeta,
    scrollbackMax: number,
    greeted: () => void,
  ) {
    super(scrollbackMax);
    this.greeted = greeted;
    this.workshop = meta.workshop;
    this.name = meta.name;
    this.command = meta.command;
    this.startedAt = new Date(meta.startedAt);
    this.pid = meta.pid;
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.inputWaiters.splice(0).forEach((w) => w());
      // The holder went away without saying how the program ended (killed): the session is over.
      if (!this.disconnecting) this.ended({ exitCode: 255, signal: null });
    });
  }

  /** Starts a holder running `argv` (the sandbox chain) on a PTY, and connects to it. */
  static async start(opts: {
    dir: string;
    workshop: string;
    name: string;
    command: string[];
    argv: string[];
    env: Record<string, string>;
    cols: number;
    rows: number;
    scrollbackBytes: number;
  }): Promise<HeldSession> {
    if (!existsSync(PYTHON)) throw new AtelierError('UNAVAILABLE', `agent sessions need ${PYTHON}: install python3`);
    const path = holderSocket(opts.dir, opts.workshop, opts.name);
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH)
      throw new AtelierError(
        'UNAVAILABLE',
        `agent sessions need a unix socket at ${path}, longer than ${MAX_SOCKET_PATH} bytes: start the server with a shorter --data-dir`,
      );
    // The socket's path on the command line names the holder in `ps` (and its server's data dir).
    const child = spawn(PYTHON, ['-I', '-S', HOLDER, path], {
      // A session of its own: the server's Ctrl-C, its end or its restart do not reach the agent.
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8' },
    });
    let why = '';
    child.stderr!.on('data', (d: Buffer) => (why = (why + d.toString('utf8')).slice(-500)));
    let programPid = 0;
    const ready = new Promise<void>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => fail(new Error('it did not start in time')), READY_TIMEOUT_MS);
      const fail = (err: Error): void => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(new AtelierError('UNAVAILABLE', `could not start the session holder: ${err.message}`));
      };
      child.once('error', fail);
      child.once('exit', (code) => fail(new Error(why.trim() || `it exited (${code})`)));
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString('utf8');
        const m = /^ready (\d+)\n/.exec(out);
        if (!m) return;
        programPid = Number(m[1]);
        clearTimeout(timer);
        child.removeAllListeners('exit');
        child.removeAllListeners('error');
        child.on('error', () => undefined);
        child.stdout!.destroy();
        child.stderr!.destroy();
        resolve();
      });
    });
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(
      JSON.stringify({
        argv: opts.argv,
        env: opts.env,
        cols: opts.cols,
        rows: opts.rows,
        scrollback: opts.scrollbackBytes,
        workshop: opts.workshop,
        name: opts.name,
        command: opts.command,
        startedAt: new Date().toISOString(),
      }),
    );
    await ready;
    // The server does not wait on it (a restart leaves it running).
    child.unref();
    try {
      return await HeldSession.connect(path, opts.scrollbackBytes);
    } catch (err) {
      // Never left running unknown to this server.
      for (const pid of [child.pid, -programPid]) {
        try {
          if (pid) process.kill(pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
      throw new AtelierError('UNAVAILABLE', `could not reach the session holder: ${(err as Error).message}`);
    }
  }

  /** Connects to a running holder (a restarted server finding its sessions again). */
  static connect(path: string, scrollbackBytes: number): Promise<HeldSession> {
    return new Promise((resolve, reject) => {
      const socket = connect(path);
      let buf: Buffer = Buffer.alloc(0);
      const timer = setTimeout(() => fail(new Error('the holder did not answer')), READY_TIMEOUT_MS);
      const fail = (err: Error): void => {
        clearTimeout(timer);
        socket.destroy();
        reject(err);
      };
      socket.once('error', fail);
      socket.once('close', () => fail(new Error('the holder closed the connection')));
      let session: HeldSession | undefined;
      // The greeting: M (who), B (recent output), X (if ended), then G. Resolved only after G, so
      // that a restarted server lists an ended session as ended and replays its whole output.
      const onData = (chunk: Buffer): void => {
        buf = buf.length > 0 ? Buffer.concat([buf, chunk]) : chunk;
        if (!session) {
          if (buf.length < 5) return;
          const n = buf.readUInt32BE(1);
          if (buf.length < 5 + n) return;
          if (buf.toString('latin1', 0, 1) !== 'M') return fail(new Error('the holder did not introduce itself'));
          let meta: HeldMeta;
          try {
            meta = JSON.parse(buf.toString('utf8', 5, 5 + n)) as HeldMeta;
          } catch {
            return fail(new Error('the holder sent malformed meta'));
          }
          if (meta.protocol !== PROTOCOL) return fail(new Error(`the holder speaks protocol ${String(meta.protocol)}, not ${PROTOCOL}`));
          session = new HeldSession(socket, meta, scrollbackBytes, () => {
            clearTimeout(timer);
            socket.off('error', fail);
            resolve(session!);
          });
          buf = buf.subarray(5 + n);
        }
        const rest = buf;
        buf = Buffer.alloc(0);
        if (rest.length > 0) session.frames(rest);
      };
      socket.on('data', onData);
    });
  }

  private greeted?: () => void;

  private frames(chunk: Buffer): void {
    let buf = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    while (buf.length >= 5) {
      const n = buf.readUInt32BE(1);
      if (buf.length < 5 + n) break;
      const kind = buf.toString('latin1', 0, 1);
      const payload = buf.subarray(5, 5 + n);
      buf = buf.subarray(5 + n);
      if (kind === 'O') this.output(Buffer.from(payload));
      else if (kind === 'A' && payload.length === 4) this.acked(payload.readUInt32BE(0));
      else if (kind === 'B') this.keep(Buffer.from(payload));
      else if (kind === 'G') {
        const g = this.greeted;
        this.greeted = undefined;
        g?.();
      } else if (kind === 'X') {
        try {
          const e = JSON.parse(payload.toString('utf8')) as PtyExit;
          this.ended({ exitCode: Number(e.exitCode), signal: typeof e.signal === 'string' ? e.signal : null });
        } catch {
          this.ended({ exitCode: 255, signal: null });
        }
      }
    }
    this.pending = Buffer.from(buf);
  }

  protected override ended(e: PtyExit): void {
    super.ended(e);
    this.inputWaiters.splice(0).forEach((w) => w());
  }

  private send(kind: string, payload: Buffer): boolean {
    if (this.socket.destroyed) return true;
    this.socket.write(header(kind, payload.length));
    return this.socket.write(payload);
  }

  // A reader that cannot keep up: the holder then stops reading the program's output (it blocks).
  protected override pauseOutput(): void {
    this.socket.pause();
  }

  protected override resumeOutput(): void {
    this.socket.resume();
  }

  /** Input; resolves once the program has read enough of what is pending (a huge paste waits). */
  write(data: Buffer): Promise<void> {
    if (this.exited || this.socket.destroyed || data.length === 0) return Promise.resolve();
    this.send('I', data);
    this.unacked += data.length;
    if (this.unacked < INPUT_HIGH_WATER) return Promise.resolve();
    return new Promise((resolve) => this.inputWaiters.push(resolve));
  }

  private acked(n: number): void {
    this.unacked = Math.max(0, this.unacked - n);
    if (this.unacked < INPUT_HIGH_WATER / 4) this.inputWaiters.splice(0).forEach((w) => w());
  }

  resize(cols: number, rows: number): void {
    if (!this.exited) this.send('R', Buffer.from(JSON.stringify({ cols, rows })));
  }

  signal(name: string): void {
    if (!this.exited) this.send('S', Buffer.from(name, 'latin1'));
  }

  /**
   * Ends the session: the holder hangs the terminal up (SIGKILL 2 s later if the program
   * lingers) and goes once the program has ended, whether or not this server is still there.
   */
  close(): void {
    this.send('K', Buffer.alloc(0));
    this.socket.end();
  }

  /** Resolves when the connection to the holder has closed (after `close()`: the holder is going). */
  gone(): Promise<void> {
    if (this.socket.destroyed || this.socket.closed) return Promise.resolve();
    return new Promise((resolve) => this.socket.once('close', () => resolve()));
  }

  /** The server stops: the session goes on, held; the next server connects again. */
  disconnect(): void {
    this.disconnecting = true;
    this.socket.destroy();
  }
}

/**
 * The holders still running under `dir` (a restarted server's sessions). The socket of a dead
 * holder (nobody listening) is removed; a live one this server cannot talk to (another protocol)
 * is left running and reported.
 */
export async function adoptHeld(dir: string, scrollbackBytes: number): Promise<{ sessions: HeldSession[]; refused: string[] }> {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.sock'));
  } catch {
    return { sessions: [], refused: [] };
  }
  const refused: string[] = [];
  const found = await Promise.all(
    names.map(async (n) => {
      const path = join(dir, n);
      try {
        return await HeldSession.connect(path, scrollbackBytes);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ECONNREFUSED' || code === 'ENOENT') {
          try {
            unlinkSync(path);
          } catch {
            // gone already
          }
        } else refused.push(`${n}: ${(err as Error).message}`);
        return undefined;
      }
    }),
  );
  return { sessions: found.filter((s): s is HeldSession => s !== undefined), refused };
}
