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
  if (opts.fromA?.length) {
    end.aToB += opts.fromA.length;
    b.write(opts.fromA);
  }
  if (opts.fromB?.length) {
    end.bToA += opts.fromB.length;
    a.write(opts.fromB);
  }
  const closed = (s: Socket): Promise<void> => (s.closed ? Promise.resolve() : new Promise((r) => s.once('close', () => r())));
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
 * Relays two connected sockets: through the splice relay (zero copy, in its child process) when
 * both can be spliced, in Node otherwise (TLS, no python). Same behaviour either way: half-close
 * both ways, a failure on one side resets the other, `cut()` resets both.
 */
export function relayPair(a: Socket, b: Socket, opts: { tag: string; fromA?: Buffer; fromB?: Buffer }): RelayedPair {
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
