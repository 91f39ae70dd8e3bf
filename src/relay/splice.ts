import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { pythonLibEnv } from '../core/index.js';

/**
 * Zero-copy relaying of socket pairs (tunnels) through splice(2), in one long-lived python child
 * per process (`splice-relay.py`, which says why and what it measured). A pair's two sockets
 * are handed over through Node's IPC channel (SCM_RIGHTS); from then on this process holds
 * neither, and learns how the pair ended from the child's answer.
 *
 * Only plain TCP and unix sockets can be spliced: a TLS socket's bytes must be decrypted here,
 * so `usable()` says no and the caller relays in Node as before. If python is missing or the
 * child dies, `usable()` says no too, and the pairs it was relaying end with `error: 'EHELPER'`.
 */
export interface SpliceResult {
  /** Bytes relayed from a to b, and from b to a. */
  aToB: number;
  bToA: number;
  /** The errno name that ended the pair (ECONNRESET, EPIPE, …; ECANCELED when cut by close). */
  error?: string;
  /** Which socket failed: 0 for a, 1 for b. */
  side?: 0 | 1;
}

export interface RelayOptions {
  /** Pairs with a tag can be cut together (`closeTag`), e.g. every tunnel of a deleted workshop. */
  tag?: string;
  /** No byte either way for this long cuts the pair (ETIMEDOUT). */
  idleMs?: number;
  /** Bytes already read from a (or b) that must reach the other side before anything spliced. */
  fromA?: Buffer;
  fromB?: Buffer;
}

interface Waiting {
  resolve(result: SpliceResult): void;
  aToB: number;
  bToA: number;
  tag?: string;
}

const PYTHON = '/usr/bin/python3';

function helperPath(): string | undefined {
  // Beside this module (dist/relay), or beside the CLI's bundle chunks (dist/bundle).
  for (const rel of ['./splice-relay.py', '../relay/splice-relay.py']) {
    const path = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(path)) return path;
  }
  return undefined;
}

export class SpliceRelay {
  private child: ChildProcess | undefined;
  private readonly waiting = new Map<number, Waiting>();
  /** Pairs whose sockets are still being flushed, before the child has them. */
  private readonly handing = new Set<{ tag: string | undefined; cut: boolean }>();
  private nextId = 1;
  private broken = false;
  /** Looked up once: `usable()` is on every new tunnel's path. */
  private readonly script = existsSync(PYTHON) ? helperPath() : undefined;

  /** Whether this pair of sockets can be spliced here. */
  usable(...sockets: Socket[]): boolean {
    // ATELIER_ZERO_COPY=0 relays in Node instead (to compare, or to rule this out when debugging).
    if (this.broken || !this.script || process.env['ATELIER_ZERO_COPY'] === '0') return false;
    return sockets.every((s) => {
      const handle = (s as unknown as { _handle?: { readStop?: unknown; fd?: number } })._handle;
      return !(s instanceof TLSSocket) && !s.destroyed && typeof handle?.readStop === 'function' && (handle.fd ?? 0) >= 0;
    });
  }

  /**
   * Hands a and b over and resolves when the pair has ended (both directions closed, or one side
   * failed, or cut). Both sockets must have nobody else reading them; what Node already buffered
   * is taken here and sent on first. Callers check `usable()` first.
   */
  async relay(a: Socket, b: Socket, options: RelayOptions = {}): Promise<SpliceResult> {
    // Nobody else reads them from now on (a listener would see what is taken below); an error
    // while they are flushed ends the pair below, it must not be an uncaught exception.
    a.removeAllListeners('data');
    b.removeAllListeners('data');
    a.on('error', noop);
    b.on('error', noop);
    // A cut asked for while the pair is still being flushed applies when the flush is done.
    const handing = { tag: options.tag, cut: false };
    this.handing.add(handing);
    const fromA = [options.fromA, ...takeBuffered(a)].filter((x): x is Buffer => !!x && x.length > 0);
    const fromB = [options.fromB, ...takeBuffered(b)].filter((x): x is Buffer => !!x && x.length > 0);
    // What was already read goes out first, and what Node still queues is flushed: only then is
    // the kernel's socket the whole truth, to be handed over.
    await Promise.all([flush(b, fromA), flush(a, fromB)]);
    this.handing.delete(handing);
    if (handing.cut) {
      resetSocket(a);
      resetSocket(b);
      return { aToB: 0, bToA: 0, error: 'ECANCELED' };
    }
    if (a.destroyed || b.destroyed) {
      a.destroy();
      b.destroy();
      return { aToB: 0, bToA: 0, error: 'ECONNRESET' };
    }
    const child = this.spawned();
    const id = this.nextId++;
    const counted = (bufs: Buffer[]): number => bufs.reduce((n, x) => n + x.length, 0);
    return new Promise<SpliceResult>((resolve) => {
      this.waiting.set(id, { resolve, aToB: counted(fromA), bToA: counted(fromB), tag: options.tag });
      this.refs();
      for (const [side, s] of [a, b].entries()) {
        stopReading(s);
        // A socket from a net.Server: detached from that server's bookkeeping as a plain
        // socket, or Node would make the server's close() wait on the child to report it.
        (s as unknown as { server: unknown }).server = null;
        child.send({ pair: id, side, tag: options.tag ?? null, idleMs: options.idleMs ?? 0 }, s, { keepOpen: true }, () => {
          // This process's descriptor is a duplicate now; closing it leaves the child's open.
          s.destroy();
        });
      }
    });
  }

  /** The python child's pid while it runs (tests count its descriptors). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Ends every pair that has this tag, including pairs still being handed over. */
  closeTag(tag: string): void {
    for (const h of this.handing) if (h.tag === tag) h.cut = true;
    if (!this.child || ![...this.waiting.values()].some((w) => w.tag === tag)) return;
    this.child.send({ closeTag: tag });
  }

  close(): void {
    this.child?.kill('SIGKILL');
  }

  private spawned(): ChildProcess {
    if (this.child) return this.child;
    const child = spawn(PYTHON, ['-I', '-S', this.script!], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', ...pythonLibEnv() },
    });
    this.child = child;
    child.on('message', (m: unknown) => this.answer(m));
    const gone = (): void => {
      if (this.child !== child) return;
      this.child = undefined;
      this.broken = true;
      for (const [id, w] of this.waiting) {
        this.waiting.delete(id);
        w.resolve({ aToB: w.aToB, bToA: w.bToA, error: 'EHELPER' });
      }
    };
    child.on('exit', gone);
    child.on('error', gone);
    this.refs();
    return child;
  }

  /** The child keeps this process alive only while it relays something. */
  private refs(): void {
    const child = this.child;
    if (!child) return;
    const channel = child.channel as { ref?: () => void; unref?: () => void } | undefined;
    if (this.waiting.size > 0) {
      child.ref();
      channel?.ref?.();
    } else {
      child.unref();
      channel?.unref?.();
    }
  }

  private answer(m: unknown): void {
    const msg = m as { done?: unknown; aToB?: unknown; bToA?: unknown; error?: unknown; side?: unknown };
    if (typeof msg?.done !== 'number') return;
    const w = this.waiting.get(msg.done);
    if (!w) return;
    this.waiting.delete(msg.done);
    this.refs();
    w.resolve({
      aToB: w.aToB + (typeof msg.aToB === 'number' ? msg.aToB : 0),
      bToA: w.bToA + (typeof msg.bToA === 'number' ? msg.bToA : 0),
      ...(typeof msg.error === 'string' ? { error: msg.error } : {}),
      ...(msg.side === 0 || msg.side === 1 ? { side: msg.side } : {}),
    });
  }
}

function noop(): void {}

/** Resets a TCP connection (RST), or just closes what is not a plain TCP socket (TLS). */
export function resetSocket(s: Socket): void {
  if (s.destroyed) return;
  try {
    s.resetAndDestroy();
  } catch {
    s.destroy();
  }
}

/** Stops libuv reading this socket, as Node itself does when a stream's buffer is full. */
function stopReading(s: Socket): void {
  const handle = (s as unknown as { _handle?: { reading?: boolean; readStop?: () => number } })._handle;
  if (handle?.readStop) {
    handle.reading = false;
    handle.readStop();
  }
  s.pause();
}

/**
 * What Node has read from s and not delivered yet. Reading the stream's buffer may restart
 * libuv's reading, but nothing can arrive before the caller's `stopReading` in this same tick.
 */
function takeBuffered(s: Socket): Buffer[] {
  s.pause();
  const out: Buffer[] = [];
  for (let chunk = s.read() as Buffer | string | null; chunk !== null; chunk = s.read() as Buffer | string | null) {
    out.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  }
  stopReading(s);
  return out;
}

/** Writes `data` to s and waits until Node's queue for s is empty (all of it given to the kernel). */
function flush(s: Socket, data: Buffer[]): Promise<void> {
  return new Promise((resolve) => {
    if (s.destroyed) return resolve();
    const onClose = (): void => resolve();
    s.once('close', onClose);
    const done = (): void => {
      s.off('close', onClose);
      resolve();
    };
    for (const d of data) s.write(d);
    if (s.writableLength === 0) return done();
    s.write(Buffer.alloc(0), () => done());
  });
}

let shared: SpliceRelay | undefined;

/** This process's relay (its python child starts on first use). */
export function spliceRelay(): SpliceRelay {
  shared ??= new SpliceRelay();
  return shared;
}
