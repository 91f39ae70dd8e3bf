import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT, exportJWK, generateKeyPair, type JWK } from 'jose';
import { AtelierError } from '../core/index.js';
import { JwtVerifier, looksLikeJwt } from './verify.js';

const ISSUER = 'http://127.0.0.1:7878/oidc';
const AUDIENCE = 'atelier';

async function keyPair(alg: 'RS256' | 'ES256' = 'RS256', kid = 'k1') {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const pub: JWK = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { privateKey, pub, kid, alg };
}

function sign(k: Awaited<ReturnType<typeof keyPair>>, claims: Record<string, unknown> = {}, opts: { exp?: number | string } = {}) {
  return new SignJWT({ ...claims })
    .setProtectedHeader({ alg: k.alg, kid: k.kid, typ: 'at+jwt' })
    .setIssuer((claims.iss as string | undefined) ?? ISSUER)
    .setAudience((claims.aud as string | undefined) ?? AUDIENCE)
    .setSubject('u-1')
    .setIssuedAt()
    .setExpirationTime(opts.exp ?? '10m')
    .sign(k.privateKey);
}

const b64 = (o: object): string => Buffer.from(JSON.stringify(o)).toString('base64url');

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof AtelierError, `expected an AtelierError, got ${String(err)}`);
    return err.code;
  }
  assert.fail('the token was accepted');
}

describe('JWT access token verification', async () => {
  const good = await keyPair();
  const other = await keyPair('RS256', 'k1');
  const verifier = new JwtVerifier({ issuer: ISSUER, audience: AUDIENCE, localJwks: async () => ({ keys: [good.pub] }) });

  it('accepts a token signed by the issuer, for this audience, in time', async () => {
    const v = await verifier.verify(await sign(good));
    assert.equal(v.claims.sub, 'u-1');
    assert.ok(v.expiresAt && Date.parse(v.expiresAt) > Date.now());
  });

  it('refuses alg "none" (an unsigned token)', async () => {
    const unsigned = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ iss: ISSUER, aud: AUDIENCE, sub: 'u-1', exp: Math.floor(Date.now() / 1000) + 600 })}.`;
    assert.ok(looksLikeJwt(unsigned));
    assert.equal(await code(verifier.verify(unsigned)), 'TOKEN_ALGORITHM_REFUSED');
  });

  it('refuses HS256 signed with the public key as the secret (algorithm confusion)', async () => {
    const secret = new TextEncoder().encode(JSON.stringify(good.pub));
    const forged = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256', kid: good.kid })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setSubject('u-1')
      .setExpirationTime('10m')
      .sign(secret);
    assert.equal(await code(verifier.verify(forged)), 'TOKEN_ALGORITHM_REFUSED');
  });

  it('refuses a wrong audience', async () => {
    assert.equal(await code(verifier.verify(await sign(good, { aud: 'someone-else' }))), 'TOKEN_AUDIENCE_INVALID');
  });

  it('refuses a wrong issuer', async () => {
    assert.equal(await code(verifier.verify(await sign(good, { iss: 'https://evil.example/oidc' }))), 'TOKEN_ISSUER_INVALID');
  });

  it('refuses an expired token', async () => {
    assert.equal(await code(verifier.verify(await sign(good, {}, { exp: Math.floor(Date.now() / 1000) - 3600 }))), 'TOKEN_EXPIRED');
  });

  it('refuses a signature from another key with the same key id', async () => {
    assert.equal(await code(verifier.verify(await sign(other))), 'TOKEN_SIGNATURE_INVALID');
  });

  it('refuses a tampered payload', async () => {
    const [h, , s] = (await sign(good)).split('.');
    const tampered = `${h}.${b64({ iss: ISSUER, aud: AUDIENCE, sub: 'u-admin', exp: Math.floor(Date.now() / 1000) + 600 })}.${s}`;
    assert.equal(await code(verifier.verify(tampered)), 'TOKEN_SIGNATURE_INVALID');
  });

  it('refuses garbage with a distinct code', async () => {
    assert.equal(await code(verifier.verify('not.a.jwt')), 'TOKEN_INVALID');
  });

  it('reads the keys again when a token names a key it has not seen (rotation on another replica)', async () => {
    const rotated = await keyPair('ES256', 'k2');
    let keys: JWK[] = [good.pub];
    const v = new JwtVerifier({ issuer: ISSUER, audience: AUDIENCE, localJwks: async () => ({ keys }) });
    await v.verify(await sign(good));
    keys = [rotated.pub, good.pub];
    await v.verify(await sign(rotated));
    await v.verify(await sign(good));
  });
});
