import { z } from 'zod';

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
