import pg from 'pg';
import { AtelierError } from '../core/index.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// Error codes and messages that mean "the database is not there", as opposed to a bad query.
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '08000', '08001', '08003', '08004', '08006', '53300']);
const UNAVAILABLE_ERRNO = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH']);

/** True when an error from `pg` means the database is unreachable (→ 503, retried by the client). */
export function isUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: string }).code;
  if (code && (UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_ERRNO.has(code))) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|the database system is (starting|shutting) down/i.test(
    err.message,
  );
}

/** Wraps connection-level failures as DATABASE_UNAVAILABLE; other errors pass through. */
export function asDatabaseError(err: unknown): unknown {
  if (err instanceof AtelierError) return err;
  // Text PostgreSQL cannot store (a NUL byte) is the client's input, never a server fault.
  const code = (err as { code?: unknown }).code;
  if (code === '22021' || code === '22P05')
    return new AtelierError('INVALID_ARGUMENT', 'text must not contain NUL bytes or characters invalid in UTF-8', undefined, {
      cause: err,
    });
  if (isUnavailable(err)) {
    return new AtelierError(
      'DATABASE_UNAVAILABLE',
      'the database is unavailable; Atelier retries by itself, try again in a few seconds',
      undefined,
      { cause: err },
    );
  }
  return err;
}

/** A pool that never crashes the process when the database goes away. */
export function createPool(connectionString: string, onError: (err: Error) => void): Pool {
  const pool = new pg.Pool({ connectionString, max: 10, connectionTimeoutMillis: 5000, idleTimeoutMillis: 30000 });
  pool.on('error', onError);
  return pool;
}

/** Runs `fn` in a transaction, rolling back on error. */
export async function withTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  let client: PoolClient;
  try {
    client = await pool.connect();
  } catch (err) {
    throw asDatabaseError(err);
  }
  try {
    await client.query('BEGIN');
    const out = await fn(client);
    await client.query('COMMIT');
    return out;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw asDatabaseError(err);
  } finally {
    client.release();
  }
}

/**
 * The rows of one query, with connection-level failures turned into DATABASE_UNAVAILABLE (and
 * NUL bytes into INVALID_ARGUMENT) by `asDatabaseError`: what every service's queries need.
 */
export async function queryRows<T extends object>(client: Pool | PoolClient, sql: string, params: unknown[] = []): Promise<T[]> {
  try {
    return (await client.query<T>(sql, params)).rows;
  } catch (err) {
    throw asDatabaseError(err);
  }
}
