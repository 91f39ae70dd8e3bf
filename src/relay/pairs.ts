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
 * way: half-close both ways, a failure on one side resets the other, `cut()` resets both.
 *
 * The pair is handed over at once, before any bulk data flows: a hand-over mid-stream must first
 * flush what Node holds while reading neither side, which two such relays in a row (the CLI's and
 * the server's, with an echo behind them) could wait on each other for ever. A new connection's
 * first bytes wait for the hand-over (two messages to the relay's child, acknowledged).
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
