import type { Adapter, AdapterPayload } from 'oidc-provider';
import { asDatabaseError, type Pool } from '../../db/index.js';

/**
 * oidc-provider's storage on table oidc_payloads: sessions, interactions, grants, device codes,
 * refresh tokens. Nothing is kept in memory, so a restart or another replica sees the same state.
 *
 * Lookups ignore expired rows, except a device code looked up by its user code: it is returned
 * for a while after expiry so that the person typing it is told "expired", not "unknown" (the
 * provider checks the expiry itself). Rows are pruned an hour after they expire.
 */
const USER_CODE_GRACE_SECONDS = 3600;

interface Row {
  payload: AdapterPayload;
  consumed: number | null;
}

function toPayload(row: Row | undefined): AdapterPayload | undefined {
  if (!row) return undefined;
  return row.consumed === null ? row.payload : { ...row.payload, consumed: row.consumed };
}

/**
 * Ids, user codes and grant ids come from requests (a refresh token, a cookie, a typed code).
 * PostgreSQL refuses NUL in text with an error, which would answer 500: one with a NUL names
 * nothing stored (the provider never makes one), so it is not looked up at all.
 */
function unstorable(key: string): boolean {
  return key.includes('\u0000');
}

const SELECT = 'SELECT payload, extract(epoch FROM consumed_at)::bigint::int AS consumed FROM oidc_payloads';

export class PostgresAdapter implements Adapter {
  constructor(
    private readonly pool: Pool,
    private readonly type: string,
  ) {}

  private async one(sql: string, params: unknown[]): Promise<AdapterPayload | undefined> {
    try {
      return toPayload((await this.pool.query<Row>(sql, params)).rows[0]);
    } catch (err) {
      throw asDatabaseError(err);
    }
  }

  private async run(sql: string, params: unknown[]): Promise<void> {
    try {
      await this.pool.query(sql, params);
    } catch (err) {
      throw asDatabaseError(err);
    }
  }

  async upsert(id: string, payload: AdapterPayload, expiresIn?: number): Promise<void> {
    await this.run(
      `INSERT INTO oidc_payloads (type, id, payload, grant_id, user_code, uid, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::int IS NULL THEN NULL ELSE now() + make_interval(secs => $7::int) END)
       ON CONFLICT (type, id) DO UPDATE SET payload = EXCLUDED.payload, grant_id = EXCLUDED.grant_id,
         user_code = EXCLUDED.user_code, uid = EXCLUDED.uid, expires_at = EXCLUDED.expires_at`,
      [
        this.type,
        id,
        JSON.stringify(payload),
        payload.grantId ?? null,
        payload.userCode ?? null,
        payload.uid ?? null,
        typeof expiresIn === 'number' ? Math.ceil(expiresIn) : null,
      ],
    );
  }

  async find(id: string): Promise<AdapterPayload | undefined> {
    if (unstorable(id)) return undefined;
    return this.one(`${SELECT} WHERE type = $1 AND id = $2 AND (expires_at IS NULL OR expires_at > now())`, [this.type, id]);
  }

  async findByUserCode(userCode: string): Promise<AdapterPayload | undefined> {
    if (unstorable(userCode)) return undefined;
    return this.one(
      `${SELECT} WHERE type = $1 AND user_code = $2 AND (expires_at IS NULL OR expires_at > now() - make_interval(secs => $3))
        ORDER BY expires_at DESC NULLS FIRST LIMIT 1`,
      [this.type, userCode, USER_CODE_GRACE_SECONDS],
    );
  }

  async findByUid(uid: string): Promise<AdapterPayload | undefined> {
    if (unstorable(uid)) return undefined;
    return this.one(`${SELECT} WHERE type = $1 AND uid = $2 AND (expires_at IS NULL OR expires_at > now())`, [this.type, uid]);
  }

  async consume(id: string): Promise<void> {
    if (unstorable(id)) return;
    await this.run('UPDATE oidc_payloads SET consumed_at = now() WHERE type = $1 AND id = $2', [this.type, id]);
  }

  async destroy(id: string): Promise<void> {
    if (unstorable(id)) return;
    await this.run('DELETE FROM oidc_payloads WHERE type = $1 AND id = $2', [this.type, id]);
  }

  async revokeByGrantId(grantId: string): Promise<void> {
    if (unstorable(grantId)) return;
    // Every artefact of the grant, whatever its type: access, refresh and device codes alike.
    await this.run('DELETE FROM oidc_payloads WHERE grant_id = $1', [grantId]);
  }
}

/** The factory oidc-provider is configured with (one adapter per model name). */
export function postgresAdapterFactory(pool: Pool): (model: string) => Adapter {
  return (model) => new PostgresAdapter(pool, model);
}

/** Deletes rows that expired more than an hour ago. */
export async function pruneExpiredPayloads(pool: Pool): Promise<number> {
  const r = await pool.query('DELETE FROM oidc_payloads WHERE expires_at < now() - make_interval(secs => $1)', [USER_CODE_GRACE_SECONDS]);
  return r.rowCount ?? 0;
}
