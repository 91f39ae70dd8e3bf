import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import pg from 'pg';
import { SignJWT, exportJWK, generateKeyPair, importJWK, type JWK } from 'jose';

type KeyLike = Parameters<SignJWT['sign']>[0];
import { MasterKey } from '../src/identity/index.js';
import { TestServer } from './helpers/server.js';

// Token attacks against the real server: each forged bearer is refused by /v1/auth/whoami with
// its own error code. Tokens that must get past the signature check are signed with the server's
// real key, read from its database and decrypted with its master key, as an attacker who stole
// the key would; the others with a key of the attacker's own.
describe('bearer token attacks', () => {
  let server: TestServer;
  let key: { kid: string; privateKey: KeyLike };
  let issuer: string;

  before(async () => {
    server = await TestServer.start();
    issuer = `${server.url}/oidc`;
    const client = new pg.Client({
      connectionString: `postgresql://atelier@/atelier?host=${encodeURIComponent(join(server.dataDir, 'pgsock'))}`,
    });
    await client.connect();
    const row = (
      await client.query<{ kid: string; private_jwk: string }>('SELECT kid, private_jwk FROM signing_keys WHERE retired_at IS NULL')
    ).rows[0]!;
    await client.end();
    const mk = MasterKey.loadOrCreate(join(server.dataDir, 'master.key'));
    const jwk = JSON.parse(mk.decrypt(row.private_jwk, `oidc-signing-key:${row.kid}`).toString('utf8')) as JWK;
    key = { kid: row.kid, privateKey: (await importJWK(jwk, 'RS256')) as KeyLike };
  });
  after(async () => {
    await server?.dispose();
  });

  async function whoami(bearer: string): Promise<{ status: number; code: string }> {
    const r = await server.api<{ code: string }>('GET', '/v1/auth/whoami', undefined, { authorization: `Bearer ${bearer}` });
    return { status: r.status, code: r.body.code };
  }

  function token(claims: { aud?: string; iss?: string; exp?: number; sub?: string; gid?: string } = {}, k = key): Promise<string> {
    return new SignJWT(claims.gid ? { gid: claims.gid } : {})
      .setProtectedHeader({ alg: 'RS256', kid: k.kid, typ: 'at+jwt' })
      .setIssuer(claims.iss ?? issuer)
      .setAudience(claims.aud ?? 'atelier')
      .setSubject(claims.sub ?? 'u-admin')
      .setIssuedAt()
      .setExpirationTime(claims.exp ?? Math.floor(Date.now() / 1000) + 300)
      .sign(k.privateKey);
  }

  const b64 = (o: object): string => Buffer.from(JSON.stringify(o)).toString('base64url');

  it('a token signed with the server key passes every cryptographic check, then needs a live grant (the control)', async () => {
    // Signature, issuer, audience and expiry are right: what is left is the grant check.
    const r = await server.api<{ code: string; message: string }>('GET', '/v1/auth/whoami', undefined, {
      authorization: `Bearer ${await token()}`,
    });
    assert.equal(r.status, 401);
    assert.equal(r.body.code, 'TOKEN_INVALID');
    assert.match(r.body.message, /names no grant/);
    assert.deepEqual(await whoami(await token({ gid: 'no-such-grant' })), { status: 401, code: 'TOKEN_REVOKED' });
  });

  it('refuses alg none', async () => {
    const none = `${b64({ alg: 'none', kid: key.kid })}.${b64({ iss: issuer, aud: 'atelier', sub: 'u-admin', exp: Math.floor(Date.now() / 1000) + 300 })}.`;
    assert.deepEqual(await whoami(none), { status: 401, code: 'TOKEN_ALGORITHM_REFUSED' });
  });

  it('refuses a wrong audience', async () => {
    assert.deepEqual(await whoami(await token({ aud: 'another-api' })), { status: 401, code: 'TOKEN_AUDIENCE_INVALID' });
  });

  it('refuses a wrong issuer', async () => {
    assert.deepEqual(await whoami(await token({ iss: 'https://evil.example/oidc' })), { status: 401, code: 'TOKEN_ISSUER_INVALID' });
  });

  it('refuses an expired token', async () => {
    assert.deepEqual(await whoami(await token({ exp: Math.floor(Date.now() / 1000) - 600 })), { status: 401, code: 'TOKEN_EXPIRED' });
  });

  it("refuses a signature from another key, even under the server key's id", async () => {
    const { privateKey } = await generateKeyPair('RS256', { extractable: true });
    assert.deepEqual(await whoami(await token({}, { kid: key.kid, privateKey })), { status: 401, code: 'TOKEN_SIGNATURE_INVALID' });
    const other = await generateKeyPair('ES256', { extractable: true });
    const jwk = await exportJWK(other.publicKey);
    const selfSigned = await new SignJWT({})
      .setProtectedHeader({ alg: 'ES256', jwk })
      .setIssuer(issuer)
      .setAudience('atelier')
      .setSubject('u-admin')
      .setExpirationTime('5m')
      .sign(other.privateKey);
    assert.deepEqual(await whoami(selfSigned), { status: 401, code: 'TOKEN_SIGNATURE_INVALID' });
  });

  it('refuses a token for a user that does not exist', async () => {
    const r = await whoami(await token({ sub: 'u-nobody' }));
    assert.equal(r.status, 401);
    assert.equal(r.code, 'UNAUTHENTICATED');
  });
});
