import { z } from 'zod';
import type { ErrorCode } from './errors.js';

/**
 * Wire contract of the terminal and tunnel WebSockets (`/v1/workshops/:id/pty`, `/tunnel`,
 * `/sessions/:name/attach`). Bytes travel as binary frames; control messages are JSON text frames.
 */

const SIZE = z.number().int().min(1).max(1000);

/** First message of a PTY WebSocket: what to run and the terminal's size. */
export const PtyStart = z.strictObject({
  type: z.literal('start'),
  /** Default: the workshop's login shell (`bash -l`). */
  command: z
    .array(z.string().max(64 << 10))
    .min(1)
    .max(4096)
    .optional(),
  cols: SIZE,
  rows: SIZE,
  term: z
    .string()
    .regex(/^[A-Za-z0-9._+-]{1,64}$/)
    .optional(),
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/), z.string().max(64 << 10)).optional(),
});
export type PtyStart = z.infer<typeof PtyStart>;

/** Signals a client may send to the foreground process group of its terminal. */
export const PTY_SIGNALS = ['SIGINT', 'SIGQUIT', 'SIGTSTP', 'SIGCONT', 'SIGTERM', 'SIGHUP', 'SIGKILL', 'SIGUSR1', 'SIGUSR2'] as const;

/** Later control messages from the client (PTY) or either side (tunnel: `eof`). */
export const TerminalControl = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('resize'), cols: SIZE, rows: SIZE }),
  z.strictObject({ type: z.literal('signal'), signal: z.enum(PTY_SIGNALS) }),
  z.strictObject({ type: z.literal('eof') }),
]);
export type TerminalControl = z.infer<typeof TerminalControl>;

/** Control messages from the server. */
export type TerminalEvent =
  | { type: 'started'; resumed: boolean; session?: string }
  | { type: 'connected'; resumed: boolean }
  | { type: 'exit'; exitCode: number; signal: string | null }
  | { type: 'eof' }
  /** Something the workshop asks a human for while this terminal is attached (never a secret's value). */
  | { type: 'approval'; id: string; category: string; what: string }
  | { type: 'error'; code: string; message: string };

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
