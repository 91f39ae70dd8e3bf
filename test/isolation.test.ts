import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { TestServer, makeRepo } from './helpers/server.js';

// Every assertion here runs from inside a real workshop, as the agent would.
describe('isolation from inside a workshop', () => {
  let server: TestServer;
  let a: { id: string };
  let b: { id: string };
  let hostPort = 0;
  const listener = createServer((s) => s.end('host service\n'));

  before(async () => {
    server = await TestServer.start();
    const repo = makeRepo({ 'secret-free.txt': 'ok\n' });
    a = await server.createWorkshop({ repo, memory: '128m', pids: 64 });
    b = await server.createWorkshop({ repo });
    await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
    hostPort = (listener.address() as { port: number }).port;
  });
  after(async () => {
    listener.close();
    await server?.dispose();
  });

  const sh = async (id: string, script: string) => server.exec(id, ['sh', '-c', script]);

  it('runs as an unprivileged uid of its own, with no capabilities', async () => {
    const ua = await sh(a.id, 'id -u; grep -E "^Cap(Eff|Prm|Bnd)" /proc/self/status; grep NoNewPrivs /proc/self/status');
    const ub = await sh(b.id, 'id -u');
    const uidA = Number(ua.stdout.split('\n')[0]);
    const uidB = Number(ub.stdout.trim());
    assert.ok(uidA > 0 && uidB > 0, 'uid is not 0');
    assert.notEqual(uidA, uidB, 'two workshops never share a uid');
    assert.match(ua.stdout, /CapEff:\s+0{16}/);
    assert.match(ua.stdout, /CapBnd:\s+0{16}/);
    assert.match(ua.stdout, /NoNewPrivs:\s+1/);
    const sudo = await sh(a.id, 'su -c true root </dev/null 2>&1; echo rc=$?');
    assert.doesNotMatch(sudo.stdout, /rc=0/);
  });

  it("cannot see the host's secrets, the server's data or other workshops", async () => {
    const paths = [
      '/etc/shadow',
      '/etc/gshadow',
      '/root',
      '/etc/ssl/private',
      '/etc/npmrc',
      '/etc/pip.conf',
      server.dataDir,
      `${server.dataDir}/credentials.txt`,
      '/var/lib/postgresql',
      '/home/atelier/../../root',
    ];
    const r = await sh(a.id, paths.map((p) => `if [ -e '${p}' ]; then echo "VISIBLE ${p}"; fi`).join('; '));
    assert.equal(r.stdout, '', `visible inside: ${r.stdout}`);
    // Only its own processes exist in its PID namespace.
    await sh(b.id, 'sleep 300 >/dev/null 2>&1 & echo started');
    const ps = await sh(
      a.id,
      'ls /proc | grep -E "^[0-9]+$" | while read p; do cat /proc/$p/cmdline 2>/dev/null | tr "\\0" " "; echo; done',
    );
    assert.doesNotMatch(ps.stdout, /sleep 300/);
    assert.doesNotMatch(ps.stdout, /atelier server|postgres/);
    const env = await sh(a.id, 'env');
    assert.doesNotMatch(env.stdout, /ATELIER_CONFIG_DIR|ATELIER_DATA_DIR/);
    // The only token inside is the workshop's own agent token: not the server's, and good for
    // this workshop alone (another workshop does not exist for it).
    const tokens = env.stdout.match(/atl_[A-Za-z0-9_-]+/g) ?? [];
    const own = /^ATELIER_TOKEN=(atl_[A-Za-z0-9_-]+)$/m.exec(env.stdout)?.[1];
    assert.ok(own, 'ATELIER_TOKEN is set');
    assert.deepEqual([...new Set(tokens)], [own]);
    assert.notEqual(own, server.token);
    const asAgent = async (path: string) => (await fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${own}` } })).status;
    assert.equal(await asAgent(`/v1/workshops/${a.id}`), 200);
    assert.equal(await asAgent(`/v1/workshops/${b.id}`), 404);
    assert.equal(await asAgent('/v1/tokens'), 403);
  });

  it('can write only to /workspace, /tmp and its home', async () => {
    const r = await sh(
      a.id,
      'for p in / /etc /usr /usr/local /var /run /dev /proc/sys/kernel; do touch "$p/x-atelier" 2>/dev/null && echo "WROTE $p"; done; touch /workspace/ok /tmp/ok /home/atelier/ok && echo fine',
    );
    assert.equal(r.stdout, 'fine\n');
  });

  it('has no network: only loopback, no route, host services unreachable', async () => {
    const r = await sh(a.id, 'cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " "; echo routes=$(tail -n +2 /proc/net/route | wc -l)');
    assert.equal(r.stdout, 'lo\nroutes=0\n');
    const tcp = await server.exec(a.id, [
      'python3',
      '-c',
      `import socket\nfor host in ['127.0.0.1', '::1']:\n    try:\n        socket.create_connection((host, ${hostPort}), timeout=2); print('CONNECTED', host)\n    except OSError as e: print('refused', host)\n# connect() on UDP only looks up a route (no packet is sent): there is none.\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('192.0.2.1', 53)); print('UDP ROUTE')\nexcept OSError: print('udp blocked')\n`,
    ]);
    assert.equal(tcp.stdout, 'refused 127.0.0.1\nrefused ::1\nudp blocked\n', tcp.stderr);
    const srv = await sh(a.id, `python3 -c "import urllib.request as u; u.urlopen('${server.url}/healthz', timeout=2)" 2>&1 | tail -1`);
    assert.match(srv.stdout, /Connection refused|URLError/);
  });

  it('contains a fork bomb and a memory hog; the server and other workshops keep working', async () => {
    const bomb = await server.exec(a.id, ['sh', '-c', 'bomb() { bomb | bomb & }; bomb; sleep 2; echo survived'], { timeoutSeconds: 8 });
    assert.ok(bomb.exitCode !== undefined);
    const healthy = await server.exec(b.id, ['echo', 'still here']);
    assert.equal(healthy.stdout, 'still here\n');
    const hog = await server.exec(a.id, ['python3', '-c', 'x = bytearray(512 * 1024 * 1024); print("allocated")'], { timeoutSeconds: 30 });
    assert.notEqual(hog.exitCode, 0, 'a 512 MB allocation in a 128m workshop fails');
    assert.doesNotMatch(hog.stdout, /allocated/);
    const h = await fetch(`${server.url}/healthz`);
    assert.equal(h.status, 200);
    assert.equal((await server.exec(b.id, ['true'])).exitCode, 0);
  });
});
