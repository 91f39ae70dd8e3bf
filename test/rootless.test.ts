import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, type TestServer, processesNaming, HARD_TO_DELETE, makeNobodyRepo, startRootlessServer } from './helpers/server.js';

// The server started by an ordinary user (here `nobody`): workshops are user namespaces.

describe('rootless server (started by an ordinary user)', () => {
  let server: TestServer;
  let base: string;
  let repo: string;

  before(async () => {
    ({ server, base } = await startRootlessServer('/tmp/atelier-rootless-'));
    // askHoldSeconds 0: a host no policy names is filed for approval and refused at once, not held.
    repo = makeNobodyRepo({ 'README.md': '# rootless\n', 'atelier.yaml': 'egress:\n  askHoldSeconds: 0\n' });
  });
  after(async () => {
    await server?.dispose();
    rmSync(base, { recursive: true, force: true });
  });

  it('says at start which protections are missing', () => {
    assert.match(server.log, /not root: workshops run in user namespaces as your own uid/);
    assert.match(server.log, /no per-workshop memory, CPU or process limits, and no suspend/);
  });

  it('creates a workshop and runs commands in it without capabilities', async () => {
    const w = await server.createWorkshop({ repo });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    const r = await server.exec(w.id, ['sh', '-c', 'id -u; pwd; cat README.md; grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status']);
    assert.match(r.stdout, /^0\n\/workspace\n# rootless\nCapEff:\s+0{16}\nCapBnd:\s+0{16}\nNoNewPrivs:\s+1\n$/);
    const cwd = await server.exec(w.id, ['pwd'], { cwd: '/tmp' });
    assert.equal(cwd.stdout, '/tmp\n');
    assert.equal((await server.exec(w.id, ['false'])).exitCode, 1);
  });

  it('is contained: no host secrets, read-only system, loopback only', async () => {
    const w = await server.createWorkshop({ repo });
    const paths = ['/root', '/etc/shadow', server.dataDir, '/home/atelier/../../root', '/var/lib/postgresql'];
    const r = await server.exec(w.id, [
      'sh',
      '-c',
      `${paths.map((p) => `[ -e '${p}' ] && echo "VISIBLE ${p}"`).join('; ')}; for p in / /etc /usr; do touch "$p/x" 2>/dev/null && echo "WROTE $p"; done; touch /workspace/ok /tmp/ok /home/atelier/ok && echo fine; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "`,
    ]);
    assert.equal(r.stdout, 'fine\nlo\n');
    // The way out is the egress proxy, bridged in as in root mode: it answers (and refuses a host
    // no policy names), direct connections fail.
    const out = await server.exec(w.id, [
      'sh',
      '-c',
      "curl -sS -m 10 -o /dev/null -w '%{http_code}' http://not-allowed.example/; echo; curl -sS -m 5 --noproxy '*' http://192.0.2.1/ >/dev/null 2>&1 || echo direct-failed",
    ]);
    assert.equal(out.stdout, '403\ndirect-failed\n', out.stderr);
    // Other workshops' processes are invisible.
    const other = await server.createWorkshop({ repo });
    await server.exec(other.id, ['sh', '-c', 'sleep 300 >/dev/null 2>&1 &']);
    const ps = await server.exec(w.id, ['sh', '-c', 'cat /proc/[0-9]*/cmdline | tr "\\0" " "']);
    assert.doesNotMatch(ps.stdout, /sleep 300/);
  });

  it('grants an approved secret on a tmpfs in the user namespace, and takes it back', async () => {
    const w = await server.createWorkshop({ repo });
    assert.equal((await server.api('PUT', '/v1/secrets/ROOTLESS_KEY', { value: 'rootless-value' })).status, 200);
    const agent = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: w.id, expiresInSeconds: 600 })).body.token;
    const filed = await server.api<{ id: string }>(
      'POST',
      `/v1/workshops/${w.id}/approvals`,
      { category: 'SECRET_REQUEST', payload: { name: 'ROOTLESS_KEY', justification: 'rootless test', ttlSeconds: 10 } },
      { authorization: `Bearer ${agent}` },
    );
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    const decided = await server.api('POST', `/v1/approvals/${filed.body.id}/decision`, { decision: 'APPROVE', reason: 'ok' });
    assert.equal(decided.status, 200, JSON.stringify(decided.body));
    let effect: { appliedAt: string | null; error: string | null } = { appliedAt: null, error: null };
    for (let i = 0; i < 200 && !effect.appliedAt; i++) {
      effect = (await server.api<{ effect: typeof effect }>('GET', `/v1/approvals/${filed.body.id}`)).body.effect;
      if (!effect.appliedAt) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(effect.error, null);
    const r = await server.exec(w.id, [
      'sh',
      '-c',
      'stat -c "%a %u" /run/atelier/secrets/ROOTLESS_KEY; stat -f -c %T /run/atelier/secrets; cat /run/atelier/secrets/ROOTLESS_KEY; echo; printenv ROOTLESS_KEY',
    ]);
    assert.equal(r.stdout, '400 0\ntmpfs\nrootless-value\nrootless-value\n', r.stderr);
    let left = 'x';
    for (let i = 0; i < 150 && left !== ''; i++) {
      left = (await server.exec(w.id, ['sh', '-c', 'ls -A /run/atelier/secrets'])).stdout;
      if (left !== '') await new Promise((x) => setTimeout(x, 200));
    }
    assert.equal(left, '');
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });

  it('gives terminals and tunnels as a root server does: ssh with a PTY, port-forward, and the SSH endpoint', async () => {
    const w = await server.createWorkshop({ repo });
    await server.exec(w.id, ['sh', '-c', 'nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &']);
    for (let i = 0; i < 100; i++) {
      const r = await server.exec(w.id, ['python3', '-c', 'import socket; socket.create_connection(("127.0.0.1", 8000)).close()']);
      if (r.exitCode === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    // A PTY (node-pty in the user namespace): a terminal, the exit code back.
    const pty = await server.cli(['ssh', w.id, '--', 'sh', '-c', 'test -t 0 && test -t 1 && echo on-a-tty; exit 7']);
    assert.equal(pty.code, 7, pty.stderr);
    assert.match(pty.stdout, /on-a-tty/);
    // A tunnel to a port inside (the connect helper enters the workshop's namespaces as the server's user).
    const get = await server.cli(['port-forward', '--stdio', w.id, '8000'], { input: 'GET /README.md HTTP/1.0\r\n\r\n' });
    assert.equal(get.code, 0, get.stderr);
    assert.match(get.stdout, /^HTTP\/1\.0 200 [\s\S]*# rootless\n$/);
    // A forward on a local port, with a real client on it.
    const pf = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'atelier'), 'port-forward', w.id, '0:8000'], {
      env: { ...process.env, ...server.env() },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let out = '';
      const local = await new Promise<number>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no forward reported: ${out}`)), 30_000);
        const seen = (c: Buffer): void => {
          out += c.toString();
          const m = /127\.0\.0\.1:(\d+)/.exec(out);
          if (m) {
            clearTimeout(t);
            resolve(Number(m[1]));
          }
        };
        pf.stdout.on('data', seen);
        pf.stderr.on('data', seen);
      });
      const res = await fetch(`http://127.0.0.1:${local}/README.md`);
      assert.equal(res.status, 200, 'the forward answered');
      assert.equal(await res.text(), '# rootless\n', 'with the file inside the workshop');
    } finally {
      pf.kill();
    }
    // The SSH endpoint at port 22 answers with its banner (the client then goes away).
    const ssh = spawn(process.execPath, [join(REPO_ROOT, 'bin', 'atelier'), 'port-forward', '--stdio', w.id, '22'], {
      env: { ...process.env, ...server.env() },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    try {
      ssh.stdin.write('SSH-2.0-probe\r\n');
      const banner = await new Promise<string>((resolve, reject) => {
        let out = '';
        // A hang guard only: beside the release build or Chromium of another test file, the CLI's
        // start, the tunnel and the endpoint's first answer took over 30 s once.
        const t = setTimeout(() => reject(new Error(`no SSH banner: ${out}`)), 120_000);
        ssh.stdout.on('data', (c: Buffer) => {
          out += c.toString('latin1');
          if (out.includes('\r\n')) {
            clearTimeout(t);
            resolve(out);
          }
        });
      });
      assert.match(banner, /^SSH-2\.0-/, 'the SSH endpoint answered');
    } finally {
      ssh.kill();
    }
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
  });

  it('refuses suspend clearly, survives a server kill -9, and deletes cleanly', async () => {
    const w = await server.createWorkshop({ repo });
    const stop = await server.api<{ code: string; message: string }>('POST', `/v1/workshops/${w.id}/stop`);
    assert.equal(stop.status, 422);
    assert.equal(stop.body.code, 'UNSUPPORTED');
    assert.match(stop.body.message, /run the server as root/);
    await server.exec(w.id, ['sh', '-c', 'sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/bg.pid']);
    // Read-only directories (a Go module cache) and a tree deeper than PATH_MAX: the server, not
    // root here, must still remove them.
    const made = await server.exec(w.id, ['sh', '-c', HARD_TO_DELETE]);
    assert.equal(made.exitCode, 0, made.stderr);
    await server.stop('SIGKILL');
    await server.boot();
    const alive = await server.exec(w.id, ['sh', '-c', 'kill -0 $(cat /tmp/bg.pid) && echo same']);
    assert.equal(alive.stdout, 'same\n');
    const root = join(server.dataDir, 'workshops', w.id);
    assert.equal((await server.api('DELETE', `/v1/workshops/${w.id}`)).status, 200);
    assert.ok(!existsSync(root));
    assert.equal(processesNaming(root), 0);
  });
});
