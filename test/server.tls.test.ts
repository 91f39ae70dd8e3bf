import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { get as httpsGet } from 'node:https';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:tls';
import Fastify, { type FastifyInstance } from 'fastify';
import { redirectToHttps, serveHttps, type HttpsListener } from '../src/server/tls.js';
import { freePort } from './terminals.helpers.js';
import { makeSelfSigned } from './helpers/tls.js';
import { TestServer } from './helpers/server.js';

// The server's HTTPS (src/server/tls.ts) on real sockets: the listener starts once the files are
// there, swaps in replaced files without a restart (a renewal), keeps the last good pair when the
// new ones do not match, and plain HTTP from another address is redirected while loopback is served.

const quiet = { info: () => undefined, warn: () => undefined };

function makePair(dir: string, name: string): { cert: Buffer; key: Buffer } {
  const { cert, key } = makeSelfSigned(dir, name);
  return { cert: readFileSync(cert), key: readFileSync(key) };
}

function presented(port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      resolve(s.getPeerCertificate().fingerprint256);
      s.destroy();
    });
    s.on('error', () => resolve(undefined));
  });
}

async function until<T>(what: string, fn: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const v = await fn();
    if (ok(v)) return v;
    assert.ok(Date.now() < deadline, `${what}: last ${String(v)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('server HTTPS: files loaded when they appear, reloaded when replaced; redirect of remote plain HTTP', () => {
  let dir: string;
  let app: FastifyInstance;
  let https: HttpsListener | undefined;
  let tlsPort: number;

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-server-tls-');
    tlsPort = await freePort();
    app = Fastify({ logger: false });
    redirectToHttps(app, () => https?.port());
    app.get('/hello', async () => ({ hello: 'world' }));
    await app.listen({ host: '0.0.0.0', port: 0 });
  });

  after(async () => {
    await https?.close();
    await app.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves HTTPS once the files exist, and swaps in replaced files (not a pair that does not match)', async () => {
    const paths = { cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') };
    https = serveHttps(app, { ...paths, listen: `127.0.0.1:${tlsPort}` }, quiet);
    assert.equal(await presented(tlsPort), undefined, 'nothing listens without the files');
    const a = makePair(dir, 'a.test');
    writeFileSync(paths.key, a.key);
    writeFileSync(paths.cert, a.cert);
    const fpA = new X509Certificate(a.cert).fingerprint256;
    await until(
      'first certificate served',
      () => presented(tlsPort),
      (fp) => fp === fpA,
    );
    assert.equal(https.port(), tlsPort);

    const b = makePair(dir, 'b.test');
    writeFileSync(paths.key, b.key);
    writeFileSync(paths.cert, b.cert);
    const fpB = new X509Certificate(b.cert).fingerprint256;
    await until(
      'the replaced certificate served',
      () => presented(tlsPort),
      (fp) => fp === fpB,
    );

    // A certificate without its key (half a renewal): the last good pair stays.
    writeFileSync(paths.cert, a.cert);
    await new Promise((r) => setTimeout(r, 2500));
    assert.equal(await presented(tlsPort), fpB);
    // The same routes over HTTPS (not curl: a synchronous child would block this process's server).
    const body = await new Promise<string>((resolve, reject) => {
      httpsGet({ host: '127.0.0.1', port: tlsPort, path: '/hello', rejectUnauthorized: false }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve(text));
      }).on('error', reject);
    });
    assert.deepEqual(JSON.parse(body), { hello: 'world' });
  });

  it('redirects plain HTTP from another address to HTTPS; serves loopback', async () => {
    const addr = app.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : 0;
    const get = (host: string): Promise<{ status: number; location?: string }> =>
      new Promise((resolve, reject) => {
        const r = request({ host, port, path: '/hello?x=1', headers: { host: `atelier.test:${port}` } }, (res) => {
          res.resume();
          resolve({ status: res.statusCode ?? 0, location: res.headers.location });
        });
        r.on('error', reject);
        r.end();
      });
    assert.equal((await get('127.0.0.1')).status, 200);
    const other = Object.values(networkInterfaces())
      .flat()
      .find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
    assert.ok(other, 'this machine has a non-loopback IPv4 address to come from');
    assert.deepEqual(await get(other), { status: 308, location: `https://atelier.test:${tlsPort}/hello?x=1` });
  });
});

describe('a real server with --tls: plain HTTP from another machine is redirected before its credentials are read', () => {
  let dir: string;
  let server: TestServer;

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-server-tls-real-');
    const { cert, key } = makeSelfSigned(dir, 'atelier.test');
    server = await TestServer.start({
      args: ['--listen', '0.0.0.0:0'],
      env: { ATELIER_TLS_CERT: cert, ATELIER_TLS_KEY: key, ATELIER_TLS_LISTEN: `127.0.0.1:${await freePort()}` },
    });
  });
  after(async () => {
    await server?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers 308 to a workshop route from another address whatever its token (the hook runs first: nothing authenticated, nothing relayed to another node in clear)', async () => {
    const port = Number(new URL(server.url).port);
    const ask = (host: string, token: string): Promise<{ status: number; location?: string }> =>
      new Promise((resolve, reject) => {
        const r = request(
          {
            host,
            port,
            method: 'GET',
            path: '/v1/workshops/ws-00000000',
            headers: { host: `atelier.test:${port}`, authorization: `Bearer ${token}` },
          },
          (res) => {
            res.resume();
            resolve({ status: res.statusCode ?? 0, location: res.headers.location });
          },
        );
        r.on('error', reject);
        r.end();
      });
    const other = Object.values(networkInterfaces())
      .flat()
      .find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
    assert.ok(other, 'this machine has a non-loopback IPv4 address to come from');
    for (const token of ['atl_not-a-token', server.token]) {
      const r = await ask(other, token);
      assert.equal(r.status, 308, `from ${other} with ${token === server.token ? 'a valid' : 'a bad'} token`);
      assert.match(r.location ?? '', /^https:\/\/atelier\.test:\d+\/v1\/workshops\/ws-00000000$/);
    }
    // From this machine the plain listener serves, and authenticates.
    assert.equal((await ask('127.0.0.1', 'atl_not-a-token')).status, 401);
    assert.equal((await ask('127.0.0.1', server.token)).status, 404);
  });
});
