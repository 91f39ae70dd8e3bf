// The plain-HTTP forwarder: what a client on one connection sends (pipelined requests, hosts
// that change, chunked bodies, HEAD, 304, interim answers), what the origin receives (exactly
// the framing the proxy decided, never a smuggled request), slow and half-open clients, and
// origins that fail mid-answer. Every test ends with no socket left open in the proxy, and
// the suite with the process back to its descriptor count.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { join } from 'node:path';
import { createEgressPolicy, createHostsResolver, type EgressDecision, EgressProxy } from '../src/egress/index.js';
import { eventually, fdCount, RawClient, tempDir } from './egress.helpers.js';

const A = '127.0.0.2';
const B = '127.0.0.3';

interface TestOrigin {
  server: http.Server;
  port: number;
  connections: number;
  /** Requests whose body arrived whole: method, path, body. */
  complete: string[];
  /** Requests that started (head seen). */
  started: number;
}

/** 3 MiB of pseudo-random printable ASCII, different per origin: a misplaced or overwritten byte shows. */
function bigBody(address: string): Buffer {
  const out = Buffer.allocUnsafe(3 * 2 ** 20);
  let x = 0x9e3779b9 ^ Number(address.split('.').at(-1));
  for (let i = 0; i < out.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = 0x20 + ((x >>> 0) % 95);
  }
  return out;
}

async function startTestOrigin(address: string): Promise<TestOrigin> {
  const big = bigBody(address);
  const o: TestOrigin = { server: undefined as unknown as http.Server, port: 0, connections: 0, complete: [], started: 0 };
  o.server = http.createServer((req, res) => {
    o.started++;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('latin1');
      o.complete.push(`${req.method} ${req.url} ${body}`);
      const sock = req.socket;
      switch (req.url ?? '') {
        case '/echo':
          res.writeHead(200, { 'content-length': Buffer.byteLength(body, 'latin1'), 'x-origin': address });
          res.end(body, 'latin1');
          return;
        case '/chunked':
          res.writeHead(200, {
            'x-origin': address,
            Connection: 'keep-alive, X-Secret-Resp',
            'X-Secret-Resp': '1',
            'Keep-Alive': 'timeout=5',
          });
          res.write('hel');
          res.addTrailers({ 'x-trailer': 'dropped' });
          setTimeout(() => res.end('lo'), 5);
          return;
        case '/head':
          res.writeHead(200, { 'content-length': 1000, 'x-origin': address });
          res.end(req.method === 'HEAD' ? undefined : 'a'.repeat(1000));
          return;
        case '/304':
          res.writeHead(304, { etag: '"v1"' });
          res.end();
          return;
        case '/hints':
          res.writeEarlyHints({ link: '</style.css>; rel=preload' });
          res.writeHead(200, { 'content-length': 2 });
          res.end('ok');
          return;
        case '/cut':
          res.writeHead(200, { 'content-length': 100 });
          res.write('partial');
          setTimeout(() => sock.destroy(), 20);
          return;
        case '/cut-head':
          sock.destroy();
          return;
        case '/close':
          // An answer delimited by the end of the connection (no length, not chunked).
          sock.end('HTTP/1.1 200 OK\r\nX-Close: 1\r\n\r\nuntil the end');
          return;
        case '/gzip-te':
          sock.end('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b');
          return;
        case '/bye':
          // Answers as if the connection stayed open, then closes it: the keep-alive race.
          res.writeHead(200, { 'content-length': 3, 'x-origin': address });
          res.end('bye', () => sock.destroy());
          return;
        case '/big':
          res.writeHead(200, { 'content-length': big.length, 'x-origin': address });
          res.end(big);
          return;
        case '/big-chunked': {
          // Chunks of uneven sizes, so that chunk boundaries fall anywhere in the proxy's reads.
          res.writeHead(200, { 'x-origin': address });
          let at = 0;
          let k = 1;
          while (at < big.length) {
            const n = Math.min(big.length - at, ((k++ * 7919) % 50_000) + 1);
            res.write(big.subarray(at, at + n));
            at += n;
          }
          res.end();
          return;
        }
        case '/hold':
          return; // never answered
        default: {
          const text = JSON.stringify({ origin: address, url: req.url, host: req.headers.host });
          res.writeHead(200, { 'content-length': Buffer.byteLength(text), 'x-origin': address });
          res.end(text);
        }
      }
    });
  });
  o.server.on('connection', (s: net.Socket) => {
    o.connections++;
    s.on('error', () => {});
  });
  await new Promise<void>((r) => o.server.listen(0, address, r));
  o.port = (o.server.address() as net.AddressInfo).port;
  return o;
}

describe('egress plain-HTTP forwarding', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let a: TestOrigin;
  let b: TestOrigin;
  let proxy: EgressProxy;
  let sock: string;
  let base: number;
  const decisions: EgressDecision[] = [];
  const errors: unknown[] = [];

  before(async () => {
    dir = await tempDir();
    a = await startTestOrigin(A);
    b = await startTestOrigin(B);
    proxy = new EgressProxy({
      resolver: createHostsResolver({ 'a.test': A, 'b.test': B }),
      onDecision: (_ws, d) => decisions.push(d),
      onError: (_ws, err) => errors.push(err),
      limits: { headerTimeoutMs: 1_000, idleTimeoutMs: 2_000 },
    });
    sock = join(dir.path, 'fwd.sock');
    await proxy.listen('ws-fwd', sock, createEgressPolicy({ allow: [`a.test:${a.port}`, `b.test:${b.port}`], allowRanges: [A, B] }));
    base = await fdCount();
  });

  after(async () => {
    await proxy.closeAll();
    for (const o of [a, b]) {
      o.server.closeAllConnections();
      await new Promise((r) => o.server.close(r));
    }
    await dir[Symbol.asyncDispose]();
  });

  const urlA = (path: string) => `http://a.test:${(a as TestOrigin).port}${path}`;
  const urlB = (path: string) => `http://b.test:${(b as TestOrigin).port}${path}`;

  /** The proxy holds no socket for this workshop any more (clients gone, their upstreams with them). */
  async function nothingOpen(): Promise<void> {
    assert.equal(
      await eventually(
        () => proxy.openSockets('ws-fwd'),
        (n) => n === 0,
      ),
      0,
      'sockets left open in the proxy',
    );
  }

  it('serves pipelined requests in order, to host A then B then A, one upstream per host', async () => {
    const connA = a.connections;
    const connB = b.connections;
    const before = decisions.length;
    const c = new RawClient(sock);
    c.write(
      `GET ${urlA('/1')} HTTP/1.1\r\nHost: x\r\n\r\nGET ${urlB('/2')} HTTP/1.1\r\nHost: x\r\n\r\n` +
        `POST ${urlA('/echo')} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET ${urlA('/4')} HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    const answers = [await c.response(), await c.response(), await c.response(), await c.response()];
    assert.deepEqual(
      answers.map((r) => [r.status, r.headers['x-origin']]),
      [
        [200, A],
        [200, B],
        [200, A],
        [200, A],
      ],
    );
    assert.deepEqual(JSON.parse(answers[0]!.body), { origin: A, url: '/1', host: `a.test:${a.port}` });
    assert.deepEqual(JSON.parse(answers[1]!.body), { origin: B, url: '/2', host: `b.test:${b.port}` });
    assert.equal(answers[2]!.body, 'hello');
    assert.deepEqual([a.connections - connA, b.connections - connB], [1, 1], 'one upstream connection per host, reused');
    assert.deepEqual(
      decisions.slice(before).map((d) => [d.host, d.reason]),
      [
        ['a.test', 'ALLOW_LISTED'],
        ['b.test', 'ALLOW_LISTED'],
        ['a.test', 'ALLOW_LISTED'],
        ['a.test', 'ALLOW_LISTED'],
      ],
      'every request is decided and recorded',
    );
    c.destroy();
    await nothingOpen();
  });

  it('streams chunked bodies both ways and strips hop-by-hop fields of answers', async () => {
    const c = new RawClient(sock);
    c.write(
      `POST ${urlA('/echo')} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n`,
    );
    const echo = await c.response();
    assert.deepEqual([echo.status, echo.body], [200, 'hello world']);
    assert.equal(a.complete.at(-1), 'POST /echo hello world');
    c.write(`GET ${urlA('/chunked')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    const ch = await c.response();
    assert.deepEqual([ch.status, ch.headers['transfer-encoding'], ch.body], [200, 'chunked', 'hello']);
    for (const h of ['x-secret-resp', 'keep-alive', 'connection', 'x-trailer']) assert.equal(ch.headers[h], undefined, h);
    // The same connection still works after a chunked answer.
    c.write(`GET ${urlA('/after')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.equal(JSON.parse((await c.response()).body).url, '/after');
    c.destroy();

    // An HTTP/1.0 client cannot read chunks: it gets the bare body, delimited by the close.
    const old = new RawClient(sock);
    old.write(`GET ${urlA('/chunked')} HTTP/1.0\r\n\r\n`);
    const r = await old.response();
    assert.deepEqual([r.status, r.headers['transfer-encoding'], r.headers.connection, r.body], [200, undefined, 'close', 'hello']);
    assert.ok(await old.closed());
    old.destroy();
    await nothingOpen();
  });

  it('keeps the connection in step through HEAD, 304, 103 and 100-continue', async () => {
    const c = new RawClient(sock);
    c.write(`HEAD ${urlA('/head')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    const head = await c.response(10_000, { head: true });
    assert.deepEqual([head.status, head.headers['content-length']], [200, '1000']);
    c.write(`GET ${urlA('/304')} HTTP/1.1\r\nHost: x\r\nIf-None-Match: "v1"\r\n\r\n`);
    const nm = await c.response();
    assert.deepEqual([nm.status, nm.headers.etag], [304, '"v1"']);
    c.write(`GET ${urlA('/hints')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    const hint = await c.response();
    assert.deepEqual([hint.status, hint.headers.link], [103, '</style.css>; rel=preload']);
    const ok = await c.response();
    assert.deepEqual([ok.status, ok.body], [200, 'ok']);
    c.write(`POST ${urlA('/echo')} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n`);
    assert.equal((await c.response()).status, 100);
    c.write('body');
    const echo = await c.response();
    assert.deepEqual([echo.status, echo.body], [200, 'body']);
    c.write(`GET ${urlA('/last')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.equal(JSON.parse((await c.response()).body).url, '/last', 'nothing of a HEAD/304 body leaked into the next answer');
    // Idle after its last answer: closed at the head deadline, without an answer to nothing.
    assert.ok(await c.closed(3_000));
    assert.equal((await c.read(1, 100)).length, 0);
    c.destroy();
    await nothingOpen();
  });

  it('refuses request smuggling: the origin only ever sees the framing the proxy decided', async () => {
    const cases: Array<{ name: string; send: string; status: number }> = [
      {
        name: 'CL and TE',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET ${urlA('/smuggled')} HTTP/1.1\r\n\r\n`,
        status: 400,
      },
      {
        name: 'TE then CL',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n`,
        status: 400,
      },
      {
        name: 'TE: chunked, chunked',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n`,
        status: 501,
      },
      {
        name: 'TE twice',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n`,
        status: 501,
      },
      {
        name: 'TE with a space before the colon',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n`,
        status: 400,
      },
      { name: 'duplicate CL', send: `POST ${urlA('/echo')} HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc`, status: 400 },
      { name: 'CL list', send: `POST ${urlA('/echo')} HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\nabc`, status: 400 },
      { name: 'bare LF', send: `GET ${urlA('/')} HTTP/1.1\nHost: x\n\n`, status: 400 },
      { name: 'bare CR (header injection)', send: `GET ${urlA('/')} HTTP/1.1\r\nX-A: 1\rX-Injected: 1\r\n\r\n`, status: 400 },
      { name: 'NUL in a value', send: `GET ${urlA('/')} HTTP/1.1\r\nX-A: 1\u0000\r\n\r\n`, status: 400 },
      { name: 'obs-fold', send: `GET ${urlA('/')} HTTP/1.1\r\nX-A: 1\r\n Host: evil\r\n\r\n`, status: 400 },
      {
        name: 'bad chunk size',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n`,
        status: 400,
      },
      {
        name: 'hex-prefixed chunk size',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n`,
        status: 400,
      },
      {
        name: 'chunk longer than its size',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n`,
        status: 400,
      },
      {
        name: 'oversized chunk size',
        send: `POST ${urlA('/echo')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n`,
        status: 400,
      },
    ];
    const before = a.complete.length;
    for (const k of cases) {
      const c = new RawClient(sock);
      c.write(k.send);
      const r = await c.response();
      assert.deepEqual([r.status, r.headers['x-atelier-egress-reason']], [k.status, 'BAD_REQUEST'], k.name);
      assert.ok(await c.closed(), `${k.name}: the connection is closed after a framing error`);
      c.destroy();
    }
    assert.deepEqual(a.complete.slice(before), [], 'no smuggled or half-framed request completed at the origin');

    // A Content-Length shorter than what follows: the rest is the next request, judged as one.
    const c = new RawClient(sock);
    c.write(`POST ${urlA('/echo')} HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /admin HTTP/1.1\r\nHost: a.test\r\n\r\n`);
    const first = await c.response();
    assert.deepEqual([first.status, first.body], [200, 'abc']);
    const second = await c.response();
    assert.deepEqual([second.status, second.headers['x-atelier-egress-reason']], [400, 'BAD_REQUEST']);
    assert.deepEqual(a.complete.slice(before), ['POST /echo abc']);
    c.destroy();

    // A Content-Length longer than what comes: the request never completes upstream.
    const short = new RawClient(sock);
    short.write(`POST ${urlA('/echo')} HTTP/1.1\r\nContent-Length: 10\r\n\r\nhello`);
    await new Promise((r) => setTimeout(r, 50));
    short.socket.end();
    assert.ok(await short.closed());
    short.destroy();
    assert.deepEqual(a.complete.slice(before), ['POST /echo abc']);
    await nothingOpen();
  });

  it('serves slow and half-open clients, and lets go of clients that leave', async () => {
    // A request dribbled a few bytes at a time (within the head deadline).
    const slow = new RawClient(sock);
    const text = `POST ${urlA('/echo')} HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\ndribbled!`;
    for (let i = 0; i < text.length; i += 7) {
      slow.write(text.slice(i, i + 7));
      await new Promise((r) => setTimeout(r, 2));
    }
    const dribbled = await slow.response();
    assert.deepEqual([dribbled.status, dribbled.body], [200, 'dribbled!']);
    slow.destroy();

    // Half-closed after a complete request: the answer still comes, then the end.
    const half = new RawClient(sock);
    half.write(`GET ${urlA('/half')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    half.socket.end();
    const r = await half.response();
    assert.equal(JSON.parse(r.body).url, '/half');
    assert.ok(await half.closed());
    half.destroy();

    // Half a head, then the end: closed without an answer.
    const partial = new RawClient(sock);
    partial.write(`GET ${urlA('/')} HTTP/1.1\r\nHo`);
    partial.socket.end();
    assert.ok(await partial.closed());
    partial.destroy();

    // Half a head and silence: the head deadline answers 408 and closes.
    const silent = new RawClient(sock);
    silent.write(`GET ${urlA('/')} HTTP/1.1\r\n`);
    assert.equal((await silent.response()).status, 408);
    assert.ok(await silent.closed());
    silent.destroy();

    // A client that leaves while its answer is pending takes its upstream with it.
    const gone = new RawClient(sock);
    gone.write(`GET ${urlA('/hold')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    await eventually(
      () => a.started,
      (n) => n > 0,
    );
    await eventually(
      () => proxy.openSockets('ws-fwd'),
      (n) => n === 2,
    );
    gone.destroy();
    await nothingOpen();
  });

  it('relays large answers intact to clients that read slowly, several at once', async () => {
    const want = new Map([
      [A, bigBody(A)],
      [B, bigBody(B)],
    ]);
    const fetchBig = async (url: string, slow: boolean): Promise<{ origin: string; body: Buffer }> => {
      const c = new RawClient(sock);
      if (slow) {
        // Reads in bursts: the proxy meets a full client buffer many times (backpressure).
        const s = c.socket;
        const timer = setInterval(() => (s.isPaused() ? s.resume() : s.pause()), 15);
        s.once('close', () => clearInterval(timer));
      }
      c.write(`GET ${url} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const r = await c.response(30_000);
      // A second request on the same connection still finds the framing in step.
      c.write(`GET ${url.replace(/\/big.*$/, '/after')} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const next = await c.response(10_000);
      c.destroy();
      assert.equal(next.status, 200);
      return { origin: r.headers['x-origin']!, body: Buffer.from(r.body, 'utf8') };
    };
    const results = await Promise.all([
      fetchBig(urlA('/big'), true),
      fetchBig(urlB('/big-chunked'), true),
      fetchBig(urlB('/big'), false),
      fetchBig(urlA('/big-chunked'), false),
    ]);
    for (const r of results) assert.ok(r.body.equals(want.get(r.origin)!), `the body from ${r.origin} arrived intact`);
    await nothingOpen();
  });

  it('answers 502 when the origin fails before answering, and cuts the client when it fails mid-answer', async () => {
    const before = await c1(`GET ${urlA('/cut-head')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.deepEqual([before.status, before.headers['x-atelier-egress-reason']], [502, 'UPSTREAM_FAILED']);

    const c = new RawClient(sock);
    c.write(`GET ${urlA('/cut')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    const cut = await c.response();
    assert.deepEqual([cut.status, cut.headers['content-length'], cut.body], [200, '100', 'partial'], 'the head and what came of the body');
    assert.ok(await c.closed(), 'the client is cut: a truncated answer must not look complete');
    c.destroy();

    const close = new RawClient(sock);
    close.write(`GET ${urlA('/close')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    const r = await close.response();
    assert.deepEqual([r.status, r.headers.connection, r.body], [200, 'close', 'until the end']);
    assert.ok(await close.closed());
    close.destroy();

    const gz = await c1(`GET ${urlA('/gzip-te')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.deepEqual([gz.status, gz.headers['x-atelier-egress-reason']], [502, 'UPSTREAM_FAILED']);

    // The next request was already written to an upstream the origin was closing: sent again
    // on a fresh connection, since nothing was answered and a GET may be repeated.
    const race = new RawClient(sock);
    race.write(`GET ${urlA('/bye')} HTTP/1.1\r\nHost: x\r\n\r\nGET ${urlA('/again')} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.equal((await race.response()).body, 'bye');
    const again = await race.response();
    assert.deepEqual([again.status, JSON.parse(again.body).url], [200, '/again']);
    race.destroy();
    await nothingOpen();
  });

  it('gives back every descriptor and reports no internal error', async () => {
    await nothingOpen();
    const now = await eventually(fdCount, (n) => n <= base);
    assert.ok(now <= base, `descriptors: ${now} now, ${base} at the start`);
    assert.deepEqual(errors, []);
  });

  async function c1(request: string) {
    const c = new RawClient(sock);
    try {
      c.write(request);
      return await c.response();
    } finally {
      c.destroy();
    }
  }
});
