import type { FastifyRequest } from 'fastify';
import { AtelierError, hashToken } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { asDatabaseError } from '../db/index.js';

export interface Principal {
  userId: string;
  userName: string;
  role: string;
  tokenId: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

/** Resolves `Authorization: Bearer atl_…` to the user behind the token. */
export async function authenticate(pool: Pool, request: FastifyRequest): Promise<Principal> {
  const header = request.headers.authorization;
  const m = header ? /^Bearer\s+(\S+)$/i.exec(header) : null;
  if (!m)
    throw new AtelierError(
      'UNAUTHENTICATED',
      'missing bearer token: run `atelier server start` once on this machine, or set ATELIER_TOKEN',
    );
  let rows;
  try {
    rows = (
      await pool.query<{ token_id: string; user_id: string; name: string; role: string }>(
        `SELECT t.id AS token_id, u.id AS user_id, u.name, u.role FROM api_tokens t JOIN users u ON u.id = t.user_id
          WHERE t.token_hash = $1 AND t.revoked_at IS NULL`,
        [hashToken(m[1]!)],
      )
    ).rows;
  } catch (err) {
    throw asDatabaseError(err);
  }
  const row = rows[0];
  if (!row)
    throw new AtelierError('UNAUTHENTICATED', 'this token is not valid (revoked, or for another server): check `atelier context current`');
  return { userId: row.user_id, userName: row.name, role: row.role, tokenId: row.token_id };
}
