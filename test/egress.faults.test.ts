// A long run of bad clients and bad targets against one workshop while another workshop is
// served: the proxy must answer or drop each of them, keep serving everyone, report no
// internal error, and give back every file descriptor.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { join } from 'node:path';
import { createEgressPolicy, type EgressDecision, EgressProxy } from '../src/egress/index.js';
import { eventually, fdCount, type Origin, RawClient, startOrigin, tempDir, viaConnect, viaHttp, viaSocks } from './egress.helpers.js';

const OK = '127.0.0.2';
const RESET = '127.0.0.4';
const HOLE = '127.0.0.5';

describe('egress proxy under bad clients and bad targets', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let origin: Origin;
  let proxy: EgressProxy;
  let bad: string;
  let good: string;
  const targets: net.Server[] = [];
  const errors: unknown[] = [];
  const decisions: Record<string, EgressDecision[]> = { 'ws-bad': [], 'ws-good': [] };

  before(async () => {
    dir = await tempDir();
    // The origin closes each connection after answering, so no upstream keep-alive socket
    // stays open and the descriptor count can come back exactly.
    origin = await startOrigin(OK, 0, { closeConnections: true });
    const port = origin.port;
    const listen = async (address: string, onConn: (s: net.Socket) => void) => {
      const srv = net.createServer(onConn);
      await new Promise<void>((r) => srv.listen(port, address, r));
      targets.push(srv);
    };
    // A target that resets every connection, and one that accepts and never says anything.
    await listen(RESET, (s) => s.resetAndDestroy());
    await listen(HOLE, (s) => {
      s.on('error', () => {});
      s.resume(); // reads (and drops) what it gets, so it sees the proxy's FIN and closes
    });
    proxy = new EgressProxy({
      resolver: {
        resolve: (name) => {
          const map: Record<string, string> = { 'ok.test': OK, 'reset.test': RESET, 'hole.test': HOLE };
          return name === 'slow.test' ? new Promise(() => {}) : Promise.resolve(map[name] ? [map[name]] : []);
        },
      },
      onDecision: (ws, d) => decisions[ws]!.push(d),
      onError: (_ws, err) => errors.push(err),
      limits: { headerTimeoutMs: 300, idleTimeoutMs: 600, dnsTimeoutMs: 200, connectTimeoutMs: 500, maxHeaderBytes: 8 * 1024 },
    });
    const policy = createEgressPolicy({
      allow: ['ok.test', 'reset.test', 'hole.test', 'slow.test'].map((h) => `${h}:${port}`),
      allowRanges: [OK, RESET, HOLE],
    });
    bad = join(dir.path, 'bad.sock');
    good = join(dir.path, 'good.sock');
    await proxy.listen('ws-bad', bad, policy);
    await proxy.listen('ws-good', good, policy);
  });

  after(async () => {
    await proxy.closeAll();
    await origin.close();
    for (const t of targets) await new Promise((r) => t.close(r));
    await dir[Symbol.asyncDispose]();
  });

  /** Send bytes, optionally wait, then either read until the proxy closes or reset. */
  async function client(steps: Array<string | Buffer | number | 'reset' | 'end'>): Promise<void> {
    const c = new RawClient(bad);
    for (const step of steps) {
      if (typeof step === 'number') await new Promise((r) => setTimeout(r, step));
      else if (step === 'reset') {
        // Unix sockets have no RST: the abrupt close is the client vanishing mid-exchange.
        c.socket.destroy();
        return;
      } else if (step === 'end') c.socket.end();
      else c.write(step);
    }
    // Every bad client must be let go by the proxy on its own (deadline, idle, answer+close).
    assert.ok(await c.closed(3_000), `the proxy kept a bad client open: ${JSON.stringify(steps.map(String)).slice(0, 200)}`);
    c.destroy();
  }

  it('survives a long run of bad clients, keeps serving, and returns to its descriptor baseline', async () => {
    const port = origin.port;
    // Warm up both paths, then take the baseline.
    assert.equal((await viaHttp(good, `http://ok.test:${port}/`)).origin?.status, 200);
    assert.equal((await viaConnect(bad, `ok.test:${port}`)).origin?.status, 200);
    await new Promise((r) => setTimeout(r, 100)); // let the warm-up's sockets finish closing
    const base = await fdCount();

    const slowloris = [
      'GET http://ok.test/ HTTP/1.1\r\n',
      100,
      'X-A: 1\r\n',
      100,
      'X-B: 2\r\n',
      100,
      'X-C: 3\r\n',
      100,
      'X-D: 4\r\n',
      100,
      'X-E: 5\r\n',
    ];
    const kinds: Array<() => Promise<void>> = [
      () => client([randomBytes(64)]),
      () => client(['GET\r\n\r\n']),
      () => client(['NOT A REQUEST AT ALL\r\n\r\n']),
      () => client([`GET http://ok.test:${port}/ HTTP/1.1\r\nX: ${'a'.repeat(16 * 1024)}\r\n\r\n`]),
      () => client(slowloris),
      () => client([]), // connects and says nothing
      () => client(['G']), // one byte, then nothing
      () => client([`CONNECT ok.test:${port} HTTP/1.1\r\n\r\n`, randomBytes(256)]), // allowed, then garbage to the origin
      () => client(['CONNECT denied.test:443 HTTP/1.1\r\n\r\n', randomBytes(256)]),
      () => client([`CONNECT ok.test:${port} HTTP/1.1\r\n\r\n`, 'reset']),
      () => client([`CONNECT reset.test:${port} HTTP/1.1\r\n\r\n`]), // target resets
      () => client([`CONNECT hole.test:${port} HTTP/1.1\r\n\r\n`]), // target silent: idle timeout
      () => client([`GET http://reset.test:${port}/ HTTP/1.1\r\nHost: x\r\n\r\n`]),
      () => client([`GET http://hole.test:${port}/ HTTP/1.1\r\nHost: x\r\n\r\n`]),
      () => client([`GET http://hole.test:${port}/ HTTP/1.1\r\nHost: x\r\n\r\n`, 20, 'reset']), // client gone mid-request
      () => client([`GET http://slow.test:${port}/ HTTP/1.1\r\nHost: x\r\n\r\n`]), // DNS never answers
      () => client([`CONNECT slow.test:${port} HTTP/1.1\r\n\r\n`, 50, 'reset']), // gone while DNS hangs
      () => client([`POST http://ok.test:${port}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort`, 'reset']),
      () => client([`CONNECT ok.test:${port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n`, 'end']), // half-close
      () => client([Buffer.from([0x05, 0x01, 0x00, 0x05, 0x01, 0x00, 0x09])]), // SOCKS bad address type
      () => client([Buffer.from([0x05, 0xff, ...randomBytes(300)])]), // SOCKS greeting overflow
      () => client([Buffer.from([0x05, 0x01])]), // SOCKS greeting cut short
      () => client([Buffer.from([0x04, 0x01, 0x00, 0x50, 127, 0, 0, 1, 0])]), // SOCKS4
      () => client([Buffer.from([0x16, 0x03, 0x01, 0x00, 0x10])]), // TLS ClientHello at a plain proxy
      () => client(['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n']),
    ];

    // Good traffic on the other workshop throughout.
    let stop = false;
    let goodOk = 0;
    const goodLoop = (async () => {
      const failures: string[] = [];
      while (!stop) {
        const r = await viaHttp(good, `http://ok.test:${port}/`).catch((e: Error) => ({ origin: undefined, proxyBody: e.message }));
        if (r.origin?.status === 200) goodOk++;
        else failures.push(r.proxyBody);
      }
      return failures;
    })();

    const rounds = 12;
    try {
      for (let round = 0; round < rounds; round++) await Promise.all(kinds.map((k) => k()));
    } finally {
      stop = true;
    }
    assert.deepEqual(await goodLoop, [], 'the other workshop was never affected');
    assert.ok(goodOk > 10);

    // The attacked workshop still serves all three protocols.
    assert.equal((await viaHttp(bad, `http://ok.test:${port}/`)).origin?.status, 200);
    assert.equal((await viaConnect(bad, `ok.test:${port}`)).origin?.status, 200);
    assert.equal((await viaSocks(bad, 'ok.test', port)).origin?.status, 200);

    // Every descriptor comes back.
    assert.equal(
      await eventually(
        () => proxy.openSockets('ws-bad'),
        (n) => n === 0,
      ),
      0,
    );
    const after = await eventually(fdCount, (n) => n <= base);
    assert.ok(after <= base, `descriptors: ${after} now, ${base} before ${rounds * kinds.length} bad clients`);
    assert.deepEqual(errors, [], 'no internal error was reported');
    const reasons = new Set(decisions['ws-bad']!.map((d) => d.reason));
    for (const r of ['BAD_REQUEST', 'NOT_ALLOWLISTED', 'DNS_TIMEOUT', 'ALLOW_LISTED'])
      assert.ok(reasons.has(r as EgressDecision['reason']), r);
  });
});
