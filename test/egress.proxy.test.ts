// The egress proxy's behaviour beyond refusals: live policy changes under load, the ask
// hook, header hygiene, keep-alive, rebinding, workshop isolation and socket lifecycle.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { AtelierError } from '../src/core/index.js';
import { type AskHook, createEgressPolicy, createHostsResolver, type EgressDecision, EgressProxy } from '../src/egress/index.js';
import { type Origin, RawClient, startOrigin, tempDir, viaConnect, viaHttp, viaSocks } from './egress.helpers.js';

const IP = '127.0.0.2';

describe('egress proxy', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let origin: Origin;
  let trap: Origin;
  const decisions: Array<{ ws: string; d: EgressDecision }> = [];
  const errors: unknown[] = [];
  let flips = 0;
  let proxy: EgressProxy;

  before(async () => {
    dir = await tempDir();
    origin = await startOrigin(IP);
    // Same port on another loopback address: reached only if the proxy dials an unchecked answer.
    trap = await startOrigin('127.0.0.3', origin.port);
    proxy = new EgressProxy({
      resolver: createHostsResolver({
        'allowed.com': IP,
        'other.com': IP,
        'asked.com': IP,
        // Alternates between the checked origin and a forbidden address on every lookup.
        'flip.com': () => [flips++ % 2 === 0 ? IP : '127.0.0.3'],
      }),
      onDecision: (ws, d) => decisions.push({ ws, d }),
      onError: (_ws, err) => errors.push(err),
    });
  });

  after(async () => {
    await proxy.closeAll();
    await origin.close();
    await trap.close();
    await dir[Symbol.asyncDispose]();
    assert.deepEqual(errors, []);
  });

  const policyFor = (allow: string[], extra: { deny?: string[]; askHoldSeconds?: number } = {}) =>
    createEgressPolicy({ allow, allowRanges: [`${IP}/32`], ...extra });

  async function workshop(id: string, allow: string[] = [`allowed.com:${origin.port}`], extra = {}): Promise<string> {
    const sock = join(dir.path, `${id}.sock`);
    await proxy.listen(id, sock, policyFor(allow, extra));
    return sock;
  }

  const last = (ws: string) => decisions.filter((x) => x.ws === ws).at(-1)!.d;

  it('applies a new policy to the next request while requests in flight and open tunnels finish', async () => {
    const sock = await workshop('ws-live');
    const url = `http://allowed.com:${origin.port}`;
    // Load: held requests over absolute-form HTTP and over CONNECT tunnels, plus an idle tunnel.
    const held = [
      ...Array.from({ length: 8 }, () => viaHttp(sock, `${url}/hold`)),
      ...Array.from({ length: 4 }, () => viaConnect(sock, `allowed.com:${origin.port}`, { path: '/hold' })),
      ...Array.from({ length: 4 }, () => viaSocks(sock, 'allowed.com', origin.port, { path: '/hold' })),
    ];
    const tunnel = new RawClient(sock);
    tunnel.write(`CONNECT allowed.com:${origin.port} HTTP/1.1\r\n\r\n`);
    assert.equal((await tunnel.response()).status, 200);
    const keepAlive = new RawClient(sock);
    keepAlive.write(`GET ${url}/ HTTP/1.1\r\nHost: x\r\n\r\n`);
    assert.equal((await keepAlive.response()).status, 200);
    while (origin.requests.filter((r) => r.url === '/hold').length < held.length) await new Promise((r) => setTimeout(r, 10));

    proxy.setPolicy('ws-live', policyFor([`other.com:${origin.port}`]));

    // The next request, on a new connection and on the kept-alive one, sees the new policy.
    const next = await viaHttp(sock, `${url}/`);
    assert.deepEqual([next.status, next.reason], [403, 'NOT_ALLOWLISTED']);
    keepAlive.write(`GET ${url}/ HTTP/1.1\r\nHost: x\r\n\r\n`);
    const again = await keepAlive.response();
    assert.deepEqual([again.status, again.headers['x-atelier-egress-reason']], [403, 'NOT_ALLOWLISTED']);
    assert.equal((await viaHttp(sock, `http://other.com:${origin.port}/`)).origin?.status, 200);

    // In-flight requests and the open tunnel are untouched.
    origin.release();
    for (const r of await Promise.all(held)) assert.equal(r.origin?.status, 200);
    tunnel.write('GET /after HTTP/1.1\r\nHost: t\r\n\r\n');
    assert.equal((await tunnel.response()).status, 200);
    tunnel.destroy();
    keepAlive.destroy();
    await proxy.close('ws-live');
  });

  it('resolves once per request and dials only the checked answer (rebinding)', async () => {
    const sock = await workshop('ws-flip', [`flip.com:${origin.port}`]);
    const before = { origin: origin.connections, trap: trap.connections, flips };
    const outcomes: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await viaConnect(sock, `flip.com:${origin.port}`);
      outcomes.push(r.origin ? 'ok' : `${r.reason}`);
    }
    assert.deepEqual(outcomes, ['ok', 'ADDRESS_FORBIDDEN', 'ok', 'ADDRESS_FORBIDDEN', 'ok', 'ADDRESS_FORBIDDEN']);
    assert.equal(flips - before.flips, 6, 'one lookup per request');
    assert.equal(trap.connections, before.trap, 'the unchecked address was never dialed');
    assert.equal(origin.connections - before.origin, 3);
    assert.equal(last('ws-flip').address, '127.0.0.3');
    await proxy.close('ws-flip');
  });

  it('keeps a plain-HTTP decision per client connection only while the policy and the answers stay the same', async () => {
    // A second origin on another allowed address, same port: where a changed answer must lead.
    const moved = await startOrigin('127.0.0.4', origin.port);
    let answer = IP;
    let lookups = 0;
    const kept = new EgressProxy({
      resolver: createHostsResolver({
        'kept.com': () => {
          lookups++;
          return [answer];
        },
      }),
      onDecision: (ws, d) => decisions.push({ ws, d }),
      onError: (_ws, err) => errors.push(err),
    });
    // Counts the policy evaluations: a kept decision is not evaluated again.
    let evaluated = 0;
    const counted = (allow: string[], deny: string[] = []) => {
      const policy = createEgressPolicy({ allow, deny, allowRanges: [`${IP}/32`, '127.0.0.4/32'] });
      const evaluate = policy.evaluate.bind(policy);
      policy.evaluate = (...args) => {
        evaluated++;
        return evaluate(...args);
      };
      return policy;
    };
    const sock = join(dir.path, 'ws-kept.sock');
    await kept.listen('ws-kept', sock, counted([`kept.com:${origin.port}`]));
    const trapBefore = trap.connections;
    const get = async (c: RawClient) => {
      c.write(`GET http://kept.com:${origin.port}/ HTTP/1.1\r\nHost: kept.com\r\n\r\n`);
      const r = await c.response();
      return [r.status, r.headers['x-origin'] ?? r.headers['x-atelier-egress-reason']];
    };
    try {
      const c = new RawClient(sock);
      // Same policy, same answer: evaluated once, kept; still resolved (and recorded) for every request.
      for (let i = 0; i < 3; i++) assert.deepEqual(await get(c), [200, `${IP}:${origin.port}`]);
      assert.deepEqual([evaluated, lookups], [1, 3]);
      const recorded = decisions.filter((x) => x.ws === 'ws-kept').map((x) => [x.d.reason, x.d.host, x.d.address]);
      assert.deepEqual(recorded, Array(3).fill(['ALLOW_LISTED', 'kept.com', IP]));

      // The answer changes (to another allowed address): decided afresh from that one lookup, dialed there.
      answer = '127.0.0.4';
      assert.deepEqual(await get(c), [200, `127.0.0.4:${origin.port}`]);
      assert.deepEqual([evaluated, lookups], [2, 4]);
      assert.equal(last('ws-kept').address, '127.0.0.4');
      // Rebinding to a forbidden address: refused at once, never dialed.
      answer = '127.0.0.3';
      assert.deepEqual(await get(c), [403, 'ADDRESS_FORBIDDEN']);
      assert.deepEqual([evaluated, lookups], [3, 5]);
      assert.equal(trap.connections, trapBefore, 'the forbidden address was never dialed');
      c.destroy();

      // A live policy change: the next request on a connection that kept a decision is judged by the new policy.
      answer = IP;
      const c2 = new RawClient(sock);
      assert.deepEqual(await get(c2), [200, `${IP}:${origin.port}`]);
      assert.deepEqual(await get(c2), [200, `${IP}:${origin.port}`]);
      assert.equal(evaluated, 4);
      kept.setPolicy('ws-kept', counted([`kept.com:${origin.port}`, 'other.com']));
      assert.deepEqual(await get(c2), [200, `${IP}:${origin.port}`]);
      assert.equal(evaluated, 5, 'a new policy object: evaluated again');
      kept.setPolicy('ws-kept', counted([`kept.com:${origin.port}`], ['kept.com']));
      assert.deepEqual(await get(c2), [403, 'DENY_LISTED']);
      assert.equal(evaluated, 6);
      c2.destroy();
    } finally {
      await kept.closeAll();
      await moved.close();
    }
  });

  it('asks about unknown hosts: allow, pending with an approval id, timeout, and never for forbidden addresses', async () => {
    const asked: string[] = [];
    const askHook: AskHook = async (host, port, ctx) => {
      asked.push(`${host}:${port}:${ctx.workshopId}:${ctx.holdMs}`);
      if (host === 'asked.com') return 'allow';
      if (host === 'pending.com') return { decision: 'pending', approvalId: 'ap-42' };
      if (host === 'refused.com') return { decision: 'deny', approvalId: 'ap-43' };
      return new Promise(() => {}); // nobody answers
    };
    // A proxy of its own: the shared one has no hook (unknown hosts are refused at once there).
    const asking = new EgressProxy({
      resolver: createHostsResolver({ 'asked.com': IP }),
      onDecision: (ws, d) => decisions.push({ ws, d }),
      onError: (_ws, err) => errors.push(err),
      ask: askHook,
      limits: { askGraceMs: 200 },
    });
    const sock = join(dir.path, 'ws-ask.sock');
    await asking.listen('ws-ask', sock, policyFor([], { askHoldSeconds: 0.2 }));
    try {
      const ok = await viaHttp(sock, `http://Asked.COM.:${origin.port}/`);
      assert.equal(ok.origin?.status, 200);
      assert.deepEqual([last('ws-ask').reason, last('ws-ask').outcome], ['ASK_ALLOWED', 'allowed']);

      const pending = await viaHttp(sock, 'http://pending.com/');
      assert.equal(pending.status, 403);
      assert.equal(pending.reason, 'ASK_PENDING');
      assert.match(pending.proxyBody, /ap-42/);
      const c = new RawClient(sock);
      c.write('CONNECT pending.com:443 HTTP/1.1\r\n\r\n');
      const pc = await c.response();
      c.destroy();
      assert.deepEqual([pc.status, pc.headers['x-atelier-approval']], [403, 'ap-42']);
      assert.deepEqual([last('ws-ask').reason, last('ws-ask').outcome, last('ws-ask').approvalId], ['ASK_PENDING', 'unknown', 'ap-42']);

      const refused = await viaSocks(sock, 'refused.com', 443);
      assert.equal(refused.status, 0x02);
      assert.deepEqual([last('ws-ask').reason, last('ws-ask').approvalId], ['ASK_DENIED', 'ap-43']);

      const t0 = Date.now();
      const silent = await viaConnect(sock, 'silent.com:443');
      assert.deepEqual([silent.status, silent.reason], [403, 'ASK_TIMEOUT']);
      assert.ok(Date.now() - t0 >= 200, 'held for the hold time');

      const n = asked.length;
      const meta = await viaConnect(sock, '169.254.169.254:443');
      assert.equal(meta.reason, 'ADDRESS_FORBIDDEN');
      assert.equal(asked.length, n, 'a forbidden address is never offered to a human');
      assert.deepEqual(asked[0], `asked.com:${origin.port}:ws-ask:200`);
    } finally {
      await asking.closeAll();
    }
  });

  it('strips hop-by-hop headers, rewrites Host, forwards bodies and keeps connections alive', async () => {
    const sock = await workshop('ws-headers');
    const c = new RawClient(sock);
    const base = `http://allowed.com:${origin.port}`;
    c.write(
      `GET ${base}/ HTTP/1.1\r\nHost: evil.example\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n` +
        'Proxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nX-Kept: yes\r\n\r\n',
    );
    assert.equal((await c.response()).status, 200);
    const seen = origin.requests.at(-1)!;
    assert.equal(seen.host, `allowed.com:${origin.port}`);
    assert.equal(seen.headers['x-kept'], 'yes');
    for (const h of ['x-secret', 'keep-alive', 'proxy-authorization', 'proxy-connection', 'te'])
      assert.equal(seen.headers[h], undefined, h);
    // Same connection: a chunked upload is forwarded and echoed.
    c.write(`POST ${base}/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`);
    const echo = await c.response();
    assert.deepEqual([echo.status, echo.body], [200, 'hello world']);
    c.destroy();

    const ws = new RawClient(sock);
    ws.write(
      `GET ${base}/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
    const up = await ws.response();
    ws.destroy();
    assert.deepEqual([up.status, up.headers['x-atelier-egress-reason']], [403, 'UPGRADE_REFUSED']);
    const h2c = new RawClient(sock);
    h2c.write(
      `GET ${base}/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n`,
    );
    assert.equal((await h2c.response()).headers['x-atelier-egress-reason'], 'UPGRADE_REFUSED');
    h2c.destroy();
    assert.equal(last('ws-headers').reason, 'UPGRADE_REFUSED');
    await proxy.close('ws-headers');
  });

  it('carries a half-closed tunnel: the client stops sending, the answer still comes back', async () => {
    const sock = await workshop('ws-half');
    for (const protocol of ['connect', 'socks5']) {
      const c = new RawClient(sock);
      if (protocol === 'connect') {
        c.write(`CONNECT allowed.com:${origin.port} HTTP/1.1\r\n\r\n`);
        assert.equal((await c.response()).status, 200);
      } else {
        c.write(
          Buffer.concat([
            Buffer.from([5, 1, 0, 5, 1, 0, 3, 11]),
            Buffer.from('allowed.com'),
            Buffer.from([origin.port >> 8, origin.port & 0xff]),
          ]),
        );
        assert.deepEqual([...(await c.read(4))], [5, 0, 5, 0]);
        await c.read(8);
      }
      c.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      c.socket.end();
      assert.equal((await c.response()).status, 200, protocol);
      assert.ok(await c.closed(), protocol);
    }
    await proxy.close('ws-half');
  });

  it('answers origin-form and https:// requests, SOCKS5 UDP and unknown auth with clear refusals', async () => {
    const sock = await workshop('ws-misc');
    const o = await viaHttp(sock, '/index.html');
    assert.deepEqual([o.status, o.reason], [400, 'BAD_REQUEST']);
    assert.match(o.proxyBody, /absolute URL/);
    const s = await viaHttp(sock, 'https://allowed.com/');
    assert.deepEqual([s.status, s.reason], [400, 'BAD_REQUEST']);
    assert.match(s.proxyBody, /CONNECT/);

    const udp = new RawClient(sock);
    udp.write(Buffer.from([0x05, 0x01, 0x00]));
    await udp.read(2);
    udp.write(Buffer.from([0x05, 0x03, 0x00, 0x01, 0, 0, 0, 0, 0, 0]));
    assert.equal((await udp.read(2))[1], 0x07);
    udp.destroy();
    assert.equal(last('ws-misc').reason, 'UNSUPPORTED');

    const auth = new RawClient(sock);
    auth.write(Buffer.from([0x05, 0x01, 0x02]));
    assert.deepEqual([...(await auth.read(2))], [0x05, 0xff]);
    assert.ok(await auth.closed());
    await proxy.close('ws-misc');
  });

  it('routes .atelier.internal names of the workshop to their targets whatever the policy, and refuses other internal names', async () => {
    // A service on a unix socket (a simulator's) and one on a host loopback port (the API's).
    const unixPath = join(dir.path, 'svc.sock');
    const svc = http.createServer((req, res) => res.end(`svc ${req.method} ${req.url} host=${req.headers.host}`));
    await new Promise<void>((r) => svc.listen(unixPath, () => r()));
    try {
      // A policy that allows nothing at all: internal names do not depend on it.
      const sock = await workshop('ws-internal', []);
      await workshop('ws-neighbour', []);
      proxy.setInternalServices('ws-internal', [
        { host: 'mock.atelier.internal', port: 8080, target: { path: unixPath } },
        { host: 'api.atelier.internal', port: 80, target: { host: IP, port: origin.port } },
      ]);
      const http1 = await viaHttp(sock, 'http://mock.atelier.internal:8080/x');
      assert.equal(http1.status, 200);
      assert.equal(http1.origin?.body, 'svc GET /x host=mock.atelier.internal:8080');
      const tunnel = await viaConnect(sock, 'MOCK.atelier.internal.:8080', { path: '/y' });
      assert.equal(tunnel.status, 200);
      assert.match(tunnel.origin?.body ?? '', /^svc GET \/y/);
      const socks = await viaSocks(sock, 'api.atelier.internal', 80, { path: '/z' });
      assert.equal(socks.status, 0);
      assert.match(socks.origin?.body ?? '', /"url":"\/z"/);
      assert.equal(last('ws-internal').reason, 'INTERNAL_SERVICE');
      // Another port, another name, or another workshop: refused, with what exists.
      const port = await viaConnect(sock, 'mock.atelier.internal:9999');
      assert.equal(port.status, 502);
      assert.equal(port.reason, 'INTERNAL_UNKNOWN');
      assert.match(
        port.proxyBody,
        /mock\.atelier\.internal:9999 is not a service of this workshop \(it has api\.atelier\.internal:80, mock\.atelier\.internal:8080\)/,
      );
      assert.equal((await viaHttp(sock, 'http://atelier.internal/')).reason, 'INTERNAL_UNKNOWN');
      assert.equal((await viaSocks(sock, 'db.atelier.internal', 5432)).status, 0x04);
      const neighbour = await viaHttp(join(dir.path, 'ws-neighbour.sock'), 'http://mock.atelier.internal:8080/x');
      assert.equal(neighbour.reason, 'INTERNAL_UNKNOWN');
      // Replaced as a whole: a name removed is refused at once.
      proxy.setInternalServices('ws-internal', []);
      assert.equal((await viaHttp(sock, 'http://mock.atelier.internal:8080/x')).reason, 'INTERNAL_UNKNOWN');
    } finally {
      await proxy.close('ws-internal');
      await proxy.close('ws-neighbour');
      await new Promise<void>((r) => svc.close(() => r()));
    }
  });

  it('cuts the open tunnels of a workshop whose listener closes, and only those', async () => {
    const a = await workshop('ws-cut');
    const b = await workshop('ws-stay');
    const open = async (sock: string): Promise<RawClient> => {
      const t = new RawClient(sock);
      t.write(`CONNECT allowed.com:${origin.port} HTTP/1.1\r\n\r\n`);
      assert.equal((await t.response()).status, 200, 'the tunnel opened');
      t.write('GET /before HTTP/1.1\r\nHost: t\r\n\r\n');
      assert.equal((await t.response()).status, 200, 'and carries a request');
      return t;
    };
    const [ta, tb] = [await open(a), await open(b)];
    const cut = new Promise<void>((r) => ta.socket.once('close', () => r()));
    await proxy.close('ws-cut');
    await cut;
    tb.write('GET /after HTTP/1.1\r\nHost: t\r\n\r\n');
    assert.equal((await tb.response()).status, 200, "the other workshop's tunnel still carries requests");
    tb.destroy();
    await proxy.close('ws-stay');
  });

  it('keeps workshops apart, refuses everything without a policy, and owns its socket file', async () => {
    const a = await workshop('ws-a');
    const b = await workshop('ws-b', [`other.com:${origin.port}`]);
    assert.equal((await viaHttp(a, `http://allowed.com:${origin.port}/`)).origin?.status, 200);
    assert.equal((await viaHttp(b, `http://allowed.com:${origin.port}/`)).reason, 'NOT_ALLOWLISTED');
    assert.equal((await stat(a)).mode & 0o777, 0o666);
    await assert.rejects(
      proxy.listen('ws-a', join(dir.path, 'again.sock')),
      (e: unknown) => e instanceof AtelierError && e.code === 'ALREADY_EXISTS',
    );

    const none = join(dir.path, 'ws-none.sock');
    await proxy.listen('ws-none', none);
    const r = await viaConnect(none, `allowed.com:${origin.port}`);
    assert.deepEqual([r.status, r.reason], [403, 'NO_POLICY']);

    await proxy.close('ws-a');
    await assert.rejects(stat(a), { code: 'ENOENT' });
    await assert.rejects(new Promise((resolve, reject) => net.connect(a).on('connect', resolve).on('error', reject)), { code: 'ENOENT' });
    assert.equal((await viaHttp(b, `http://other.com:${origin.port}/`)).origin?.status, 200, 'closing one workshop leaves the others');
    // A stale socket file (after a crash) is replaced on the next listen.
    await proxy.close('ws-b');
    // A socket file left by a process that died (python binds and exits without unlinking).
    const py = spawnSync('python3', [
      '-c',
      'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])',
      join(dir.path, 'stale.sock'),
    ]);
    assert.equal(py.status, 0, String(py.stderr));
    assert.ok((await stat(join(dir.path, 'stale.sock'))).isSocket());
    await proxy.listen('ws-stale', join(dir.path, 'stale.sock'), policyFor([`allowed.com:${origin.port}`]));
    assert.equal((await viaSocks(join(dir.path, 'stale.sock'), 'allowed.com', origin.port)).origin?.status, 200);
    // Any other file is left alone.
    await writeFile(join(dir.path, 'plain.sock'), 'not a socket');
    await assert.rejects(
      proxy.listen('ws-plain', join(dir.path, 'plain.sock')),
      (e: unknown) => e instanceof AtelierError && e.code === 'CONFLICT',
    );
    await proxy.closeAll();
  });
});
