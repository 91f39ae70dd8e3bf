import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { SandboxConnectError, type SandboxHandle } from '../../sandbox/index.js';
import { pythonLibEnv } from '../../core/index.js';
import type { SandboxEntry } from '../driver.js';

const HELPER = fileURLToPath(new URL('./netns-connector.py', import.meta.url));
/** A connector nobody used for this long exits (it holds the workshop's network namespace). */
const IDLE_MS = 30_000;
const TIMEOUT_MS = 10_000;

interface Pending {
  port: number;
  resolve(socket: Socket): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/** The command line that runs a host program (`argv`) in a sandbox's network namespace only. */
export type NetnsEntry = (handle: SandboxHandle, argv: string[]) => SandboxEntry;

/** One helper process inside one workshop's network namespace, connecting on request. */
class Connector {
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private idle: NodeJS.Timeout | undefined;
  private stderr = '';
  gone = false;

  constructor(entry: NetnsEntry, handle: SandboxHandle, onGone: () => void) {
    const { argv, env } = entry(handle, ['/usr/bin/python3', '-I', '-S', HELPER]);
    this.child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe', 'ipc'], env: { ...env, ...pythonLibEnv() } });
    this.child.stderr!.on('data', (c: Buffer) => (this.stderr = (this.stderr + c.toString()).slice(-2000)));
    this.child.on('message', (m: unknown, socket?: Socket) => this.answer(m, socket));
    const end = (): void => {
      if (this.gone) return;
      this.gone = true;
      clearTimeout(this.idle);
      onGone();
      const why = `the connect helper exited${this.stderr ? `: ${this.stderr.trim()}` : ''}`;
      for (const [id, p] of this.pending) {
        this.pending.delete(id);
        clearTimeout(p.timer);
        p.reject(new Error(why));
      }
    };
    this.child.on('exit', end);
    this.child.on('error', end);
    // Neither the helper nor its channel keeps the server's event loop alive.
    this.child.unref();
    (this.child.channel as { unref?: () => void } | undefined)?.unref?.();
  }

  connect(port: number, timeoutMs: number): Promise<Socket> {
    clearTimeout(this.idle);
    const id = this.nextId++;
    return new Promise<Socket>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SandboxConnectError('ETIMEDOUT', `no answer from port ${port} in the workshop within ${timeoutMs} ms`));
        this.armIdle();
      }, timeoutMs);
      this.pending.set(id, { port, resolve, reject, timer });
      this.child.send({ id, port }, (err) => {
        if (err) this.close();
      });
    });
  }

  close(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }

  private answer(m: unknown, socket: Socket | undefined): void {
    const msg = m as { id?: unknown; error?: unknown };
    const p = typeof msg?.id === 'number' ? this.pending.get(msg.id) : undefined;
    if (!p) {
      // Its requester timed out meanwhile.
      socket?.destroy();
      return;
    }
    this.pending.delete(msg.id as number);
    clearTimeout(p.timer);
    if (socket) p.resolve(socket);
    else {
      const errno = typeof msg.error === 'string' ? msg.error : 'EIO';
      p.reject(
        new SandboxConnectError(
          errno,
          errno === 'ECONNREFUSED' ? `nothing listens on port ${p.port} in the workshop` : `port ${p.port} in the workshop: ${errno}`,
        ),
      );
    }
    this.armIdle();
  }

  private armIdle(): void {
    if (this.pending.size > 0) return;
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.close(), IDLE_MS);
    this.idle.unref();
  }
}

/**
 * TCP connections to ports inside workshops, made by one long-lived helper per workshop (under
 * `nsenter --net`, started on first use, gone after 30 s unused) instead of a helper process per
 * connection: a new connection costs a message, not a process start (which dominated short
 * requests: ~150–200 ms on this machine under load, against ~1 ms for a direct connection).
 * The result: a socket owned by the server, or SandboxConnectError when nothing listens. The local
 * driver's `connect` (a driver of another kind dials its sandboxes its own way).
 */
export class SandboxConnectors {
  private readonly connectors = new Map<string, Connector>();

  constructor(private readonly entry: NetnsEntry) {}

  connect(handle: SandboxHandle, port: number, timeoutMs = TIMEOUT_MS): Promise<Socket> {
    const key = `${handle.pid}:${handle.startTime}`;
    let c = this.connectors.get(key);
    if (!c || c.gone) {
      const fresh: Connector = new Connector(this.entry, handle, () => {
        if (this.connectors.get(key) === fresh) this.connectors.delete(key);
      });
      c = fresh;
      this.connectors.set(key, c);
    }
    return c.connect(port, timeoutMs);
  }

  close(): void {
    for (const c of this.connectors.values()) c.close();
    this.connectors.clear();
  }
}
