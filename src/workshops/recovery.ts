/**
 * Recovery after a server start: which failures pass by themselves (the database briefly gone
 * or slow, a timeout on a starved host, a helper slow to start) and are retried, and how long to
 * wait before the next try. A workshop is never given up, nor its sandbox torn down, for one.
 */
import { AtelierError } from '../core/index.js';
import { isUnavailable } from '../db/index.js';

/** The reason a workshop shows while its recovery is retried (Running or Suspended, files and processes untouched). */
export const RECOVERING = 'recovering after a restart';

/**
 * SQLSTATEs of a database that answers but not now: lock_not_available (lock_timeout),
 * query_canceled (statement_timeout), serialization_failure, deadlock_detected.
 */
const BUSY_SQLSTATES = new Set(['55P03', '57014', '40001', '40P01']);
/** errno of a host short of something for a moment (processes, files, memory, a peer). */
const BUSY_ERRNO = new Set(['ETIMEDOUT', 'EAGAIN', 'EMFILE', 'ENFILE', 'ENOMEM', 'ECONNRESET', 'EPIPE']);

/**
 * What is really happening when `err` will pass by itself, in the words a workshop's reason
 * uses ("the database is unavailable"); undefined when it will not (retrying cannot help).
 */
export function transientCause(err: unknown): string | undefined {
  if (err instanceof AtelierError) {
    if (err.code === 'DATABASE_UNAVAILABLE') return 'the database is unavailable';
    return err.cause === undefined ? undefined : transientCause(err.cause);
  }
  if (!(err instanceof Error)) return undefined;
  if (isUnavailable(err)) return 'the database is unavailable';
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && BUSY_SQLSTATES.has(code)) return `the database is busy (${err.message})`;
  if (typeof code === 'string' && BUSY_ERRNO.has(code)) return err.message;
  // The sandbox's helpers (listeners in its namespace, a simulator) bounded by a deadline, and
  // the pool's wait for a connection: slow on a starved host, not broken.
  if (/did not (open|start|become ready|answer) within|timed? ?out|timeout exceeded/i.test(err.message)) return err.message;
  return undefined;
}

/** Seconds before retry `attempt` (1, 2, 4 … then every 30 s: a workshop is never given up for a transient cause). */
export function retryDelaySeconds(attempt: number): number {
  return Math.min(30, 2 ** Math.max(0, attempt - 1));
}
