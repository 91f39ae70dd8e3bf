import type { Socket } from 'node:net';
import { resetSocket, spliceRelay } from './splice.js';

/** What a relay reports when a pair of connections is over. */
export interface RelayEnd {
  /** Bytes relayed from the first socket to the second, and back. */
  aToB: number;
  bToA: number;
  /** Set when the pair did not end with both half-closes: how (`ECONNRESET`, `EPIPE`, `cut`…). */
  error?: string;
  /** Which side failed first (its error was propagated to the other as a reset). */
  failed?: 'a' | 'b';
}

/** Resolves once `s` is closed. */
function closed(s: Socket): Promise<void> {
  return s.closed ? Promise.resolve() : new Promise((r) => s.once('close', () => r()));
}

/** Bytes already read from a (`fromA`) go to b first, and from b to a, counted. */
function sendAlreadyRead(a: Socket, b: Socket, opts: { fromA?: Buffer; fromB?: Buffer }, count: { aToB: number; bToA: number }): void {
  if (opts.fromA?.length) {
    count.aToB += opts.fromA.length;
    b.write(opts.fromA);
  }
  if (opts.fromB?.length) {
    count.bToA += opts.fromB.length;
    a.write(opts.fromB);
  }
}

/**
 * Relays two connected sockets in Node (for what a splice relay cannot take: TLS, or no splice
 * helper): backpressure both ways (a side that does not read pauses the other; nothing is queued
 * beyond the sockets' own buffers), half-close both ways, and an error or reset on one side
 * resets the other. `fromA` is what was already read from `a` and goes to `b` first. `cut()`
 * resets both. `done` resolves once both sockets are closed.
 */
export function nodeRelay(a: Socket, b: Socket, opts: { fromA?: Buffer; fromB?: Buffer } = {}): { done: Promise<RelayEnd>; cut(): void } {
  const end: RelayEnd = { aToB: 0, bToA: 0 };
  const sides = { a, b };
  const other = (side: 'a' | 'b'): Socket => (side === 'a' ? b : a);
  const readEnded = { a: false, b: false };
  const fail = (side: 'a' | 'b', why: string): void => {
    if (end.error === undefined) {
      end.error = why;
      end.failed = side;
    }
    resetSocket(other(side));
    sides[side].destroy();
  };
  for (const side of ['a', 'b'] as const) {
    const src = sides[side];
    const dst = other(side);
    src.allowHalfOpen = true;
    src.setNoDelay(true);
    src.on('data', (chunk: Buffer) => {
      if (side === 'a') end.aToB += chunk.length;
      else end.bToA += chunk.length;
      if (!dst.write(chunk)) {
        src.pause();
        dst.once('drain', () => src.resume());
      }
    });
    src.on('end', () => {
      readEnded[side] = true;
      if (!dst.destroyed) dst.end();
    });
    src.on('error', (err: NodeJS.ErrnoException) => fail(side, err.code ?? err.message));
    // Closed by its owner before both ways were done: the other side is reset, not left open.
    src.on('close', () => {
      if (!dst.destroyed && !(readEnded[side] && src.writableFinished)) fail(side, 'closed');
    });
  }
  sendAlreadyRead(a, b, opts, end);
  const done = Promise.all([closed(a), closed(b)]).then(() => end);
  a.resume();
  b.resume();
  return {
    done,
    cut() {
      if (end.error === undefined) end.error = 'cut';
      resetSocket(a);
      resetSocket(b);
    },
  };
}

/** A relayed pair: `done` once both sockets are closed; `cut()` resets both. */
export interface RelayedPair {
  done: Promise<RelayEnd>;
  /** `spliced`: relayed by the kernel (splice(2) in the relay child), not through this process. */
  spliced: boolean;
  cut(): void;
}

/**
 * Relays two connected sockets, handed to the splice relay at once (zero copy, in its child
 * process) when both can be spliced, in Node otherwise (TLS, no python). Same behaviour either
 * way: half-close both ways, a failure on one side resets the other, `cut()` resets both. Callers
 * want `relayPair`, which spares a new connection's first bytes the hand-over's wait.
 */
export function relaySpliced(a: Socket, b: Socket, opts: { tag: string; fromA?: Buffer; fromB?: Buffer }): RelayedPair {
  const splice = spliceRelay();
  if (!splice.usable(a, b)) return { ...nodeRelay(a, b, opts), spliced: false };
  let ended = false;
  const done = splice.relay(a, b, { tag: opts.tag, fromA: opts.fromA, fromB: opts.fromB }).then((r): RelayEnd => {
    ended = true;
    const end: RelayEnd = { aToB: r.aToB, bToA: r.bToA };
    if (r.error !== undefined) {
      end.error = r.error === 'ECANCELED' ? 'cut' : r.error;
      if (r.side !== undefined) end.failed = r.side === 0 ? 'a' : 'b';
    }
    return end;
  });
  return {
    done,
    spliced: true,
    cut() {
      if (!ended) splice.closeTag(opts.tag);
    },
  };
}

/** A pair relayed in Node first moves to `relaySpliced` (splice) at the first bytes back, past this many bytes sent… */
const EARLY_BYTES = 128 << 10;
/** …once it is this old, or at the first half-close. */
const EARLY_MS = 20;

/**
 * Relays two connected sockets (every tunnel: port-forward on both hops, internal names):
 * `relaySpliced`, with the pair's first bytes relayed in Node: a new connection's first request and
 * the first chunk of its answer do not wait for the splice relay to take the sockets (two
 * messages with a handle to its child, each acknowledged: on loopback under load, milliseconds).
 * Once the first bytes came back from `b` (the side of the server that answers), past
 * EARLY_BYTES from `a`, after EARLY_MS, or at the first half-close, the pair moves to
 * `relaySpliced` (the splice relay takes what Node has buffered and waits for what Node still
 * writes; nothing is reordered), so bulk transfers and long sessions are spliced as before. Same
 * behaviour as `relaySpliced` meanwhile: backpressure both ways (a side that does not read pauses
 * the other), an error or close on one side resets the other, `cut()` resets both. A pair that
 * cannot be spliced (TLS, no splice relay) is relayed in Node throughout, as `relaySpliced` does.
 */
export function relayPair(a: Socket, b: Socket, opts: { tag: string; fromA?: Buffer; fromB?: Buffer }): RelayedPair {
  // Relayed in Node from start to end anyway (TLS, no splice relay): nothing to hand over.
  if (!spliceRelay().usable(a, b)) return relaySpliced(a, b, opts);
  const early = { aToB: 0, bToA: 0 };
  let later: RelayedPair | undefined;
  let settled = false;
  let cutAsked = false;
  let resolveDone!: (end: RelayEnd) => void;
  const done = new Promise<RelayEnd>((resolve) => (resolveDone = resolve));
  const sides = { a, b };
  const other = (side: 'a' | 'b'): Socket => (side === 'a' ? b : a);
  const listeners: [Socket, string, (...args: never[]) => void][] = [];
  const on = (s: Socket, event: string, fn: (...args: never[]) => void): void => {
    s.on(event, fn as (...args: unknown[]) => void);
    listeners.push([s, event, fn]);
  };
  const detach = (): void => {
    clearTimeout(timer);
    for (const [s, event, fn] of listeners) s.off(event, fn as (...args: unknown[]) => void);
    listeners.length = 0;
  };
  const fail = (side: 'a' | 'b', why: string): void => {
    if (settled) return;
    settled = true;
    detach();
    a.on('error', () => undefined);
    b.on('error', () => undefined);
    resetSocket(other(side));
    sides[side].destroy();
    void Promise.all([closed(a), closed(b)]).then(() => resolveDone({ ...early, error: why, failed: side }));
  };
  const handOver = (): void => {
    if (settled) return;
    settled = true;
    detach();
    later = relaySpliced(a, b, { tag: opts.tag });
    void later.done.then((end) => resolveDone({ ...end, aToB: end.aToB + early.aToB, bToA: end.bToA + early.bToA }));
  };
  for (const side of ['a', 'b'] as const) {
    const src = sides[side];
    const dst = other(side);
    src.allowHalfOpen = true;
    src.setNoDelay(true);
    on(src, 'data', (chunk: Buffer) => {
      if (side === 'a') early.aToB += chunk.length;
      else early.bToA += chunk.length;
      if (!dst.write(chunk)) {
        src.pause();
        dst.once('drain', () => {
          if (!settled) src.resume();
        });
      }
      if (early.aToB >= EARLY_BYTES || early.bToA >= EARLY_BYTES) handOver();
    });
    on(src, 'end', () => handOver());
    on(src, 'error', (err: NodeJS.ErrnoException) => fail(side, err.code ?? err.message));
    on(src, 'close', () => fail(side, 'closed'));
  }
  const timer = setTimeout(handOver, EARLY_MS);
  timer.unref();
  sendAlreadyRead(a, b, opts, early);
  a.resume();
  b.resume();
  return {
    done,
    spliced: false,
    cut() {
      if (later) return later.cut();
      if (cutAsked || settled) return;
      cutAsked = true;
      settled = true;
      detach();
      a.on('error', () => undefined);
      b.on('error', () => undefined);
      resetSocket(a);
      resetSocket(b);
      void Promise.all([closed(a), closed(b)]).then(() => resolveDone({ ...early, error: 'cut' }));
    },
  };
}
