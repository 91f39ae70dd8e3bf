import type { Socket } from 'node:net';
import type { ErrorCode } from './errors.js';
import { resetSocket, spliceRelay } from './splice.js';

export { resetSocket };

/**
 * The byte tunnel: what `GET /v1/workshops/:id/tunnel?port=N` speaks after an HTTP/1.1
 * `Upgrade: atelier-tunnel` (the WebSocket form of the same route stays for browsers).
 *
 * The request carries `Atelier-Tunnel-Mode: raw`; the `101 Switching Protocols` acknowledges it
 * (same header) and names the tunnel (`Atelier-Tunnel-Id`). From then on the connection carries
 * the bytes of the connection inside the workshop and nothing else, so that both the server and
 * the CLI can hand their two sockets to a zero-copy splice relay:
 * - a half-close is a half-close (TCP FIN), both ways;
 * - a connection reset inside the workshop resets the tunnel (TCP RST), and the client's reset
 *   resets the connection inside;
 * - why a tunnel ended abnormally (reset inside the workshop, the workshop deleted, the server
 *   shutting down) is kept by the server for a while: the client asks
 *   `GET /v1/workshops/:id/tunnels/:tunnel` once it sees a reset. A server that cannot be reached
 *   or has no record of the tunnel means it was cut (server restarted or network down).
 */
export const TUNNEL_PROTOCOL = 'atelier-tunnel';
/** The 101 response header saying whether the workshop was resumed for this tunnel. */
export const TUNNEL_RESUMED_HEADER = 'atelier-resumed';
/** Request header asking for a raw tunnel, echoed by the 101 that grants it. */
export const TUNNEL_MODE_HEADER = 'atelier-tunnel-mode';
export const TUNNEL_MODE_RAW = 'raw';
/** The 101 response header naming the tunnel (for `GET /v1/workshops/:id/tunnels/:tunnel`). */
export const TUNNEL_ID_HEADER = 'atelier-tunnel-id';

export const TUNNEL_CUT_MESSAGE = 'the tunnel was cut (server restarted or network down)';
export const TUNNEL_RESET_INSIDE_MESSAGE = 'the connection inside the workshop was reset';

/**
 * How a tunnel went, as the server tells it: `open` (still relaying), `closed` (both ways ended
 * normally), `reset` (a reset inside the workshop, or by the client), `cut` (by the server:
 * workshop deleted, server shutting down, SSH endpoint failure), `unknown` (no record: the server
 * restarted since, or it ended long ago).
 */
export interface TunnelOutcome {
  id: string;
  workshop: string;
  state: 'open' | 'closed' | 'reset' | 'cut' | 'unknown';
  code?: ErrorCode;
  message: string;
}

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
