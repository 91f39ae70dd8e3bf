// The credential broker's requests, byte by byte: after the proxy ends the client's TLS, each
// request to a bound host goes through the plain-HTTP forwarder's strict parser with the bound
// field set. Real TLS on both sides (a workshop authority the client trusts, an origin with a
// CA of the test's own), a real proxy on a unix socket. What the origin receives is checked:
// pipelined requests each carry the credential (the client's own value never), a chunked body
// arrives whole, and an ambiguous framing, a protocol switch, a value that would split the head
// or a deleted secret reach nothing upstream.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { Authorities, CredentialBroker, createEgressPolicy, createHostsResolver, EgressProxy } from '../src/egress/index.js';
import { makeOriginCertificates } from './helpers/tls.js';

const BOUND = 'api.bound.test';
const WS = 'ws-broker';

interface Seen {
  method: string;
  url: string;
  auth: string | undefined;
  host: string | undefined;
  body: string;
}

describe('credential broker: requests through a binding', () => {
  let dir: string;
  let origin: https.Server;
  let port: number;
  let proxy: EgressProxy;
  let broker: CredentialBroker;
  let socketPath: string;
  let workshopCa: string;
  let secret: string | undefined = 's3cret-value';
  let seen: Seen[] = [];
  let upstreamConnections = 0;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'atelier-broker-'));
    const certs = makeOriginCertificates(dir, [BOUND]);
    origin = https.createServer({ key: readFileSync(certs.key), cert: readFileSync(certs.cert) }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('latin1');
        seen.push({ method: req.method ?? '', url: req.url ?? '', auth: req.headers.authorization, host: req.headers.host, body });
        const answer = Buffer.from(`${req.url} ${body}`);
        res.writeHead(200, { 'content-length': answer.length });
        res.end(answer);
      });
    });
    origin.on('connection', () => upstreamConnections++);
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    port = (origin.address() as net.AddressInfo).port;
    broker = new CredentialBroker({
      authorities: new Authorities(join(dir, 'authorities')),
      secretValue: async () => secret,
      upstreamCa: [readFileSync(certs.ca, 'utf8')],
    });
    proxy = new EgressProxy({ resolver: createHostsResolver(new Map([[BOUND, ['127.0.0.1']]])), broker });
    socketPath = join(dir, 'proxy.sock');
    await proxy.listen(
      WS,
      socketPath,
      createEgressPolicy({ allow: [`${BOUND}:${port}`], allowRanges: ['127.0.0.1/32'], askHoldSeconds: 0 }),
    );
    broker.setBindings(WS, [{ host: BOUND, port, header: 'Authorization', secret: 'TOKEN', prefix: 'Bearer ', suffix: '' }]);
    workshopCa = await broker.authorityPem(WS);
  });

  after(async () => {
    await proxy?.closeAll();
    broker?.close();
    origin?.closeAllConnections();
    await new Promise<void>((r) => (origin ? origin.close(() => r()) : r()));
    rmSync(dir, { recursive: true, force: true });
  });

  /** CONNECT through the proxy, then TLS trusting the workshop's authority: the client's end of a bound connection. */
  const open = async (): Promise<tls.TLSSocket> => {
    const raw = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect(socketPath, () => s.write(`CONNECT ${BOUND}:${port} HTTP/1.1\r\nHost: ${BOUND}:${port}\r\n\r\n`));
      let head = '';
      const onData = (c: Buffer): void => {
        head += c.toString('latin1');
        if (!head.includes('\r\n\r\n')) return;
        s.off('data', onData);
        if (/^HTTP\/1\.1 200/.test(head)) resolve(s);
        else reject(new Error(head));
      };
      s.on('data', onData);
      s.once('error', reject);
    });
    return new Promise((resolve, reject) => {
      const t = tls.connect({ socket: raw, servername: BOUND, ca: workshopCa }, () => resolve(t));
      t.once('error', reject);
    });
  };

  /** Writes `bytes`, then reads until the connection closes or `answers` complete answers (content-length framed) are in. */
  const exchange = (t: tls.TLSSocket, bytes: string, answers: number): Promise<{ heads: string[]; bodies: string[]; closed: boolean }> =>
    new Promise((resolve) => {
      let buf = Buffer.alloc(0);
      const heads: string[] = [];
      const bodies: string[] = [];
      const done = (closed: boolean): void => {
        t.removeAllListeners('data');
        resolve({ heads, bodies, closed });
      };
      t.on('data', (c: Buffer) => {
        buf = Buffer.concat([buf, c]);
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const head = buf.subarray(0, end).toString('latin1');
          const len = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
          if (buf.length < end + 4 + len) return;
          heads.push(head);
          bodies.push(buf.subarray(end + 4, end + 4 + len).toString('latin1'));
          buf = buf.subarray(end + 4 + len);
          if (heads.length === answers) return done(false);
        }
      });
      t.once('close', () => done(true));
      t.write(bytes);
    });

  it('pipelined requests each leave with the bound value in place of the client’s own (any case), answered in order, on one upstream', async () => {
    seen = [];
    upstreamConnections = 0;
    const t = await open();
    const r = await exchange(
      t,
      `GET /one HTTP/1.1\r\nHost: elsewhere.test\r\nAuthorization: Bearer mine\r\n\r\n` +
        `GET /two HTTP/1.1\r\nHost: ${BOUND}\r\nAUTHORIZATION: Bearer mine\r\nauthorization: Basic bWluZQ==\r\n\r\n`,
      2,
    );
    t.destroy();
    assert.deepEqual(r.bodies, ['/one ', '/two ']);
    assert.deepEqual(
      seen.map((s) => [s.url, s.auth, s.host]),
      [
        ['/one', 'Bearer s3cret-value', `${BOUND}:${port}`],
        ['/two', 'Bearer s3cret-value', `${BOUND}:${port}`],
      ],
    );
    assert.equal(upstreamConnections, 1);
  });

  it('the leaf for the bound host is made once and kept (a month-long leaf once outran the timer that drops it)', async () => {
    const a = await open();
    const b = await open();
    const [fa, fb] = [a.getPeerCertificate().fingerprint256, b.getPeerCertificate().fingerprint256];
    a.destroy();
    b.destroy();
    assert.ok(fa);
    assert.equal(fa, fb);
  });

  it('a chunked body arrives whole, with the credential', async () => {
    seen = [];
    const t = await open();
    const r = await exchange(
      t,
      `POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`,
      1,
    );
    t.destroy();
    assert.equal(r.bodies[0], '/echo hello world');
    assert.deepEqual(
      seen.map((s) => [s.method, s.body, s.auth]),
      [['POST', 'hello world', 'Bearer s3cret-value']],
    );
  });

  it('an ambiguous framing (Content-Length and Transfer-Encoding) is refused before anything leaves', async () => {
    seen = [];
    const t = await open();
    const r = await exchange(
      t,
      `POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /second HTTP/1.1\r\n\r\n`,
      1,
    );
    t.destroy();
    assert.match(r.heads[0] ?? '', /^HTTP\/1\.1 400 /);
    assert.deepEqual(seen, []);
  });

  it('a protocol switch is refused: nothing would carry the credential past it', async () => {
    seen = [];
    const t = await open();
    const r = await exchange(t, `GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`, 1);
    t.destroy();
    assert.match(r.heads[0] ?? '', /^HTTP\/1\.1 403 /);
    assert.match(r.bodies[0] ?? '', /protocol upgrade to "websocket" is not allowed/);
    assert.deepEqual(seen, []);
  });

  it('a value that would split the head is never written: 502 CREDENTIAL_INVALID, nothing sent, the value not in the answer', async () => {
    seen = [];
    secret = 'ok\r\nX-Injected: 1';
    try {
      const t = await open();
      const r = await exchange(t, `GET /split HTTP/1.1\r\nHost: x\r\n\r\n`, 1);
      t.destroy();
      assert.match(r.heads[0] ?? '', /^HTTP\/1\.1 502 /);
      assert.match(r.heads[0] ?? '', /x-atelier-egress: CREDENTIAL_INVALID/);
      assert.doesNotMatch(r.bodies[0] ?? '', /X-Injected|ok\\r/);
      assert.deepEqual(seen, []);
    } finally {
      secret = 's3cret-value';
    }
  });

  it('a secret deleted while a connection is kept alive: the next request is answered 403 CREDENTIAL_GONE and the connection ends', async () => {
    seen = [];
    const t = await open();
    const first = await exchange(t, `GET /before HTTP/1.1\r\nHost: x\r\n\r\n`, 1);
    assert.equal(first.bodies[0], '/before ');
    secret = undefined;
    try {
      const r = await exchange(t, `GET /after HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer mine\r\n\r\n`, 2);
      assert.match(r.heads[0] ?? '', /^HTTP\/1\.1 403 /);
      assert.equal((JSON.parse(r.bodies[0] ?? '{}') as { code?: string }).code, 'CREDENTIAL_GONE');
      assert.equal(r.closed, true);
      assert.deepEqual(
        seen.map((s) => s.url),
        ['/before'],
      );
    } finally {
      secret = 's3cret-value';
      t.destroy();
    }
  });
});
