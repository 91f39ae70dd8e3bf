import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { BIN, TestServer, makeRepo } from './helpers/server.js';

// The egress proxy wired into real workshops: from inside the sandbox, the project's allowed
// names work through HTTP_PROXY, CONNECT and SOCKS5; anything else is denied and recorded; and
// there is no other way out (direct TCP and UDP fail). The origins are on this host: a loopback
// address the admin explicitly allows (ATELIER_EGRESS_ALLOW_RANGES) under names from a hosts file.
const ORIGIN = '127.0.0.3';
const HTTP_PORT = 18080;
const TUNNEL_PORT = 18443;

function hostAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  return undefined;
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
}

describe('egress from inside a workshop', () => {
  let server: TestServer;
  let ws: string;
  let dir: string;
  let repo: string;
  const origins: Server[] = [];
  let hits = 0;

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-egress-');
    for (const [port, host] of [
      [HTTP_PORT, ORIGIN],
      [TUNNEL_PORT, ORIGIN],
      [HTTP_PORT, '0.0.0.0'],
    ] as const) {
      const s = createServer((req, res) => {
        hits++;
        res.end(`hello from ${req.headers.host ?? '?'} port ${port}\n`);
      });
      // The 0.0.0.0 one (on another port) is only there to be unreachable from the workshop.
      await listen(s, host === '0.0.0.0' ? HTTP_PORT + 1 : port, host);
      origins.push(s);
    }
    const hosts = join(dir, 'hosts');
    writeFileSync(hosts, `${ORIGIN} allowed.test tunnel.test denied.test\n`);
    server = await TestServer.start({
      env: {
        ATELIER_EGRESS_HOSTS: hosts,
        ATELIER_EGRESS_ALLOW_RANGES: `${ORIGIN}/32`,
        ATELIER_EGRESS_DEFAULTS: 'none',
        ATELIER_EGRESS_DNS: '127.0.0.1',
      },
    });
    repo = makeRepo({
      'atelier.yaml': [
        '# egress for the test origins',
        'egress:',
        `  allow: ["allowed.test:${HTTP_PORT}", "tunnel.test:${TUNNEL_PORT}"]`,
        '  askHoldSeconds: 0',
        '',
      ].join('\n'),
    });
    const w = await server.createWorkshop({ repo, name: 'egress' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
  });

  after(async () => {
    await server?.dispose();
    for (const s of origins) s.close();
    rmSync(dir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  const sh = (script: string) => server.exec(ws, ['sh', '-c', script]);

  it('sets the proxy variables for every process', async () => {
    const r = await sh('env | grep -i _proxy= | sort');
    for (const v of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'all_proxy', 'no_proxy'])
      assert.match(r.stdout, new RegExp(`^${v}=`, 'm'));
    assert.match(r.stdout, /^NO_PROXY=localhost,127\.0\.0\.1,::1,\.atelier\.internal$/m);
  });

  it('reaches an allowed name through HTTP_PROXY (absolute-form HTTP)', async () => {
    const r = await sh(`curl -sS -m 10 http://allowed.test:${HTTP_PORT}/hi`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, `hello from allowed.test:${HTTP_PORT} port ${HTTP_PORT}\n`);
  });

  it('reaches an allowed name through a CONNECT tunnel and through SOCKS5', async () => {
    const t = await sh(`curl -sS -m 10 --proxytunnel http://tunnel.test:${TUNNEL_PORT}/`);
    assert.equal(t.exitCode, 0, t.stderr);
    assert.match(t.stdout, new RegExp(`port ${TUNNEL_PORT}`));
    const s = await sh(`curl -sS -m 10 --noproxy '' -x '' --socks5-hostname 127.0.0.1:3128 http://allowed.test:${HTTP_PORT}/`);
    assert.equal(s.exitCode, 0, s.stderr);
    assert.match(s.stdout, /hello from allowed\.test/);
  });

  it('denies a name the project does not allow, saying why', async () => {
    const before = hits;
    const r = await sh(`curl -sS -m 10 -o /tmp/body -w '%{http_code}' http://denied.test:${HTTP_PORT}/; cat /tmp/body >&2`);
    assert.equal(r.stdout, '403');
    // Unknown to the policy: filed as an approval request (askHoldSeconds: 0 answers at once).
    assert.match(r.stderr, /denied\.test:\d+ is waiting for a human's approval \(request [0-9a-f-]{36}\)/);
    const p = await sh(`curl -sS -m 10 http://allowed.test:${HTTP_PORT + 5}/ -o /dev/null -w '%{http_code}'`);
    assert.equal(p.stdout, '403', 'a port the entry does not name');
    assert.equal(hits, before, 'nothing reached an origin');
  });

  it('has no other way out: direct TCP (also --noproxy) and UDP fail', async () => {
    const host = hostAddress();
    assert.ok(host, 'this host has a non-loopback IPv4 address');
    const direct = await sh(`curl -sS -m 5 --noproxy '*' http://${host}:${HTTP_PORT + 1}/`);
    assert.notEqual(direct.exitCode, 0);
    const loop = await sh(`curl -sS -m 5 --noproxy '*' http://${ORIGIN}:${HTTP_PORT}/`);
    assert.notEqual(loop.exitCode, 0, "the host's loopback is not the workshop's");
    const udp = createSocket('udp4');
    let received = 0;
    udp.on('message', () => received++);
    await new Promise<void>((resolve) => udp.bind(HTTP_PORT + 2, '0.0.0.0', resolve));
    const u = await sh(
      `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('${host}', ${HTTP_PORT + 2}))"`,
    );
    await new Promise((r) => setTimeout(r, 200));
    udp.close();
    assert.notEqual(u.exitCode, 0, u.stdout + u.stderr);
    assert.match(u.stderr, /unreachable/i);
    assert.equal(received, 0);
  });

  it('records every decision, shown by `atelier workshops egress` (also --follow)', async () => {
    const r = await server.cli(['workshops', 'egress', ws, '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const items = JSON.parse(r.stdout) as { host: string; port: number; allowed: boolean; reason: string; protocol: string }[];
    const all = JSON.stringify(items, null, 1);
    assert.ok(
      items.some((d) => d.host === 'allowed.test' && d.allowed && d.reason === 'ALLOW_LISTED' && d.protocol === 'http'),
      all,
    );
    assert.ok(items.some((d) => d.host === 'tunnel.test' && d.allowed && d.protocol === 'connect'));
    assert.ok(items.some((d) => d.host === 'allowed.test' && d.protocol === 'socks5'));
    assert.ok(items.some((d) => d.host === 'denied.test' && !d.allowed && d.reason === 'ASK_PENDING'));
    assert.ok(items.some((d) => d.host === 'allowed.test' && d.port === HTTP_PORT + 5 && d.reason === 'PORT_NOT_ALLOWED'));
    const status = await server.cli(['workshops', 'status', ws]);
    // The live policy, each entry with where it came from (docs/egress.md).
    assert.match(status.stdout, new RegExp(`allow\\s+allowed\\.test:${HTTP_PORT}\\s+project \\(atelier\\.yaml\\)`));
    assert.match(status.stdout, new RegExp(`allow\\s+tunnel\\.test:${TUNNEL_PORT}\\s+project \\(atelier\\.yaml\\)`));
    assert.match(status.stdout, new RegExp(`range\\s+${ORIGIN.replace(/\\./g, '\\\\.')}/32\\s+platform \\(server configuration\\)`));
    const table = await server.cli(['workshops', 'egress', ws]);
    assert.match(table.stdout, /TIME\s+DECISION\s+HOST/);

    const follow = spawn(process.execPath, [BIN, 'workshops', 'egress', ws, '--follow', '--limit', '1'], {
      env: server.env(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    follow.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const seen = (re: RegExp): Promise<void> =>
      new Promise((resolve, reject) => {
        const t = setInterval(() => {
          if (re.test(out)) {
            clearInterval(t);
            resolve();
          }
        }, 50);
        setTimeout(() => {
          clearInterval(t);
          reject(new Error(`not seen in --follow output: ${re}\n${out}`));
        }, 10_000).unref();
      });
    await seen(/\n?$/);
    await sh(`curl -sS -m 5 http://followed.test:${HTTP_PORT}/ -o /dev/null`);
    await seen(/denied.*followed\.test/);
    follow.kill('SIGINT');
  });

  it('keeps working across a server restart', async () => {
    await server.stop();
    await server.boot();
    const r = await sh(`curl -sS -m 10 http://allowed.test:${HTTP_PORT}/again`);
    assert.equal(r.exitCode, 0, r.stderr);
  });
});
