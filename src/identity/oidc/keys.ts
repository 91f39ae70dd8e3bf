import { randomBytes } from 'node:crypto';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import { withTransaction, type Pool, type PoolClient } from '../../db/index.js';
import type { MasterKey } from '../masterKey.js';

/**
 * The embedded issuer's signing keys (table signing_keys). One key signs; keys rotated out stay
 * published (retired_at set) for `retentionSeconds`, so tokens they signed keep verifying until
 * they expire, then they are dropped. Private halves are sealed with the master key, bound to
 * their kid, so a row copied onto another key's id does not decrypt.
 */
export const SIGNING_ALG = 'RS256';

/** Serialises key changes between replicas sharing one database (an arbitrary constant). */
const LOCK_ID = 0x61746c6b; // 'atlk'

export interface SigningKeys {
  /** Private JWKs for the provider, the current signing key first. */
  signing: JWK[];
  /** Their public halves, as published in the JWKS. */
  published: JWK[];
}

function sealContext(kid: string): string {
  return `oidc-signing-key:${kid}`;
}

async function insertKey(c: PoolClient, mk: MasterKey): Promise<string> {
  const kid = randomBytes(12).toString('base64url');
  const { privateKey, publicKey } = await generateKeyPair(SIGNING_ALG, { modulusLength: 2048, extractable: true });
  const meta = { kid, alg: SIGNING_ALG, use: 'sig' };
  const priv = { ...(await exportJWK(privateKey)), ...meta };
  const pub = { ...(await exportJWK(publicKey)), ...meta };
  await c.query('INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk) VALUES ($1, $2, $3, $4)', [
    kid,
    SIGNING_ALG,
    JSON.stringify(pub),
    mk.encrypt(JSON.stringify(priv), sealContext(kid)),
  ]);
  return kid;
}

/** Creates the first signing key when there is none in use (first start). */
export async function ensureSigningKey(pool: Pool, mk: MasterKey): Promise<void> {
  await withTransaction(pool, async (c) => {
    await c.query('SELECT pg_advisory_xact_lock($1)', [LOCK_ID]);
    const current = await c.query('SELECT 1 FROM signing_keys WHERE retired_at IS NULL');
    if (current.rowCount === 0) await insertKey(c, mk);
  });
}

/**
 * Makes a new key the signing key. The previous ones stay published until `retentionSeconds`
 * after their retirement (the lifetime of the tokens they signed, plus a margin); older ones go.
 */
export async function rotateSigningKey(pool: Pool, mk: MasterKey, retentionSeconds: number): Promise<{ kid: string }> {
  return withTransaction(pool, async (c) => {
    await c.query('SELECT pg_advisory_xact_lock($1)', [LOCK_ID]);
    await c.query('UPDATE signing_keys SET retired_at = now() WHERE retired_at IS NULL');
    await c.query('DELETE FROM signing_keys WHERE retired_at < now() - make_interval(secs => $1)', [retentionSeconds]);
    return { kid: await insertKey(c, mk) };
  });
}

/** The keys in use: the current one, then retired ones still within `retentionSeconds`. */
export async function loadSigningKeys(pool: Pool, mk: MasterKey, retentionSeconds: number): Promise<SigningKeys> {
  const r = await pool.query<{ kid: string; public_jwk: JWK; private_jwk: string }>(
    `SELECT kid, public_jwk, private_jwk FROM signing_keys
      WHERE retired_at IS NULL OR retired_at >= now() - make_interval(secs => $1)
      ORDER BY retired_at DESC NULLS FIRST, created_at DESC`,
    [retentionSeconds],
  );
  return {
    signing: r.rows.map((row) => JSON.parse(mk.decrypt(row.private_jwk, sealContext(row.kid)).toString('utf8')) as JWK),
    published: r.rows.map((row) => row.public_jwk),
  };
}
