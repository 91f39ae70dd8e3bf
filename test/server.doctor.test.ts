import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { makeRepo, runCli, TestServer } from './helpers/server.js';

interface Check {
  name: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
  fix?: string;
  ms: number;
}
interface Doctor {
  ok: boolean;
  checks: Check[];
  probe?: { server: string; workshop?: string; steps: { name: string; status: string; ms: number; detail: string }[] };
}

const NAMES = [
  'architecture',
  'kvm',
  'memory',
  'disk',
  'dns',
  'user namespaces',
  'bubblewrap',
  'cgroups',
  'system-call filter',
  'disk quotas',
  'postgresql',
  'simulators',
  'clock',
];

/** A doctor run of the real CLI with its own config dir (no context: the checks need none). */
function doctor(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return runCli(['server', 'doctor', ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: scratch, ...env },
  });
}

function check(r: Doctor, name: string): Check {
  const c = r.checks.find((x) => x.name === name);
  assert.ok(c, `no check named ${name} in ${r.checks.map((x) => x.name).join(', ')}`);
  return c;
}

function listening(): Promise<Server> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
}

const scratch = mkdtempSync('/tmp/atelier-doctor-');

describe('atelier server doctor', () => {
  after(() => rmSync(scratch, { recursive: true, force: true }));

  it('runs every check on this machine, each with a fix when it warns or fails', async () => {
    const free = await listening();
    const port = (free.address() as { port: number }).port;
    // Free again: the doctor must find it free.
    await new Promise((r) => free.close(r));
    const r = await doctor(['-o', 'json', '--data-dir', join(scratch, 'data'), '--listen', `127.0.0.1:${port}`]);
    const report = JSON.parse(r.stdout) as Doctor;
    for (const name of [...NAMES, `port ${port}`]) check(report, name);
    for (const c of report.checks) {
      assert.ok(['ok', 'warn', 'fail', 'skip'].includes(c.status), `${c.name}: ${c.status}`);
      if (c.status === 'warn' || c.status === 'fail') assert.ok(c.fix && c.fix.length > 10, `${c.name} has no fix: ${c.detail}`);
    }
    // This machine runs the whole test suite: it has everything a server needs.
    assert.deepEqual(
      report.checks.filter((c) => c.status === 'fail').map((c) => `${c.name}: ${c.detail}`),
      [],
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(check(report, `port ${port}`).status, 'ok');
    assert.equal(check(report, 'system-call filter').status, 'ok');
    assert.equal(check(report, 'dns').status, 'skip', 'no --domain: nothing to resolve');
  });

  it('a port in use fails, saying how to find what holds it', async () => {
    const busy = await listening();
    try {
      const port = (busy.address() as { port: number }).port;
      const r = await doctor(['-o', 'json', '--data-dir', join(scratch, 'data'), '--listen', `127.0.0.1:${port}`]);
      assert.equal(r.code, 1, r.stdout);
      const c = check(JSON.parse(r.stdout) as Doctor, `port ${port}`);
      assert.equal(c.status, 'fail');
      assert.match(c.detail, /in use by another program/);
      assert.match(c.fix!, new RegExp(`ss -ltnp 'sport = :${port}'`));
      // The table shows the failure and its fix.
      const text = await doctor(['--data-dir', join(scratch, 'data'), '--listen', `127.0.0.1:${port}`]);
      assert.equal(text.code, 1);
      assert.match(text.stdout, new RegExp(`FAIL  port ${port} +127\\.0\\.0\\.1:${port} is in use`));
      assert.match(text.stdout, /fix: find it with `ss -ltnp/);
      assert.match(text.stdout, /doctor found problems/);
    } finally {
      await new Promise((r) => busy.close(r));
    }
  });

  it('a data dir on a small filesystem fails the disk check', async () => {
    const mnt = join(scratch, 'small');
    mkdirSync(mnt, { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', mnt]);
    try {
      const r = await doctor(['-o', 'json', '--data-dir', join(mnt, 'data')]);
      assert.equal(r.code, 1);
      const c = check(JSON.parse(r.stdout) as Doctor, 'disk');
      assert.equal(c.status, 'fail');
      assert.match(c.detail, /free under .*small\/data .*less than one workshop's default disk/);
      assert.match(c.fix!, /--data-dir on a larger filesystem/);
    } finally {
      execFileSync('umount', [mnt]);
    }
  });

  it('bubblewrap missing from the PATH fails with the command that installs it', async () => {
    const bin = join(scratch, 'bin');
    mkdirSync(bin, { recursive: true });
    for (const tool of ['sh', 'unshare', 'nsenter', 'setpriv', 'git', 'python3', 'losetup', 'id', 'mkfs.ext4']) {
      const path = execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim();
      rmSync(join(bin, tool), { force: true });
      symlinkSync(path, join(bin, tool));
    }
    const r = await doctor(['-o', 'json', '--data-dir', join(scratch, 'data')], { PATH: bin });
    assert.equal(r.code, 1, r.stderr);
    const c = check(JSON.parse(r.stdout) as Doctor, 'bubblewrap');
    assert.equal(c.status, 'fail');
    assert.match(c.detail, /missing system tools: bwrap/);
    assert.match(c.fix!, /apt-get install -y bubblewrap/);
  });
});

describe('atelier server doctor --probe and server status, against a real server', () => {
  let server: TestServer;
  let repo: string;
  before(async () => {
    server = await TestServer.start();
    repo = makeRepo();
  });
  after(async () => {
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('the probe creates, execs in, forwards to, suspends, resumes and deletes a workshop, timing each step', async () => {
    const r = await server.cli(['server', 'doctor', '--probe', '--repo', repo, '--data-dir', server.dataDir, '-o', 'json']);
    const report = JSON.parse(r.stdout) as Doctor;
    assert.ok(report.probe, r.stderr);
    assert.equal(report.probe.server, server.url);
    assert.deepEqual(
      report.probe.steps.map((s) => `${s.name} ${s.status}${s.status === 'ok' ? '' : `: ${s.detail}`}`),
      ['create ok', 'exec ok', 'port-forward ok', 'suspend ok', 'resume ok', 'delete ok'],
    );
    for (const s of report.probe.steps) assert.ok(s.ms >= 0);
    assert.equal(r.code, 0, r.stdout);
    // Nothing is left behind.
    const list = await server.api<{ items: unknown[] }>('GET', '/v1/workshops');
    assert.deepEqual(list.body.items, []);
  });

  it('status shows the service, the server, its database, disk and workshops by state', async () => {
    const ws = await server.createWorkshop({ repo, memory: '256m' });
    try {
      const r = await server.cli(['server', 'status', '--data-dir', server.dataDir, '-o', 'json']);
      assert.equal(r.code, 0, r.stderr);
      const s = JSON.parse(r.stdout) as {
        service: { running: boolean; pid: number; dataDir: string };
        server: {
          version: string;
          pid: number;
          url: string;
          uptimeSeconds: number;
          database: { kind: string; ok: boolean; version: string; sizeBytes: number };
          disk: { totalBytes: number; freeBytes: number };
          workshops: Record<string, number>;
          simulators: { running: number };
          recentErrors: unknown[];
        };
      };
      assert.deepEqual(s.service, { dataDir: server.dataDir, running: true, pid: server.proc!.pid });
      assert.equal(s.server.pid, server.proc!.pid);
      assert.equal(s.server.url, server.url);
      assert.match(s.server.version, /^\d+\.\d+\.\d+/);
      assert.equal(s.server.database.kind, 'embedded');
      assert.equal(s.server.database.ok, true);
      assert.ok(s.server.database.sizeBytes > 0);
      assert.ok(s.server.disk.freeBytes > 0 && s.server.disk.freeBytes <= s.server.disk.totalBytes);
      assert.deepEqual(s.server.workshops, { Running: 1 });
      assert.equal(s.server.simulators.running, 0);
      assert.ok(Array.isArray(s.server.recentErrors));

      const text = await server.cli(['server', 'status', '--data-dir', server.dataDir]);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, new RegExp(`service: +running \\(pid ${server.proc!.pid}\\) for ${server.dataDir}`));
      assert.match(text.stdout, /database: +embedded PostgreSQL \d+/);
      assert.match(text.stdout, /workshops: +1 Running/);
      assert.match(text.stdout, /certificate: +none \(plain HTTP\)/);
    } finally {
      await server.api('DELETE', `/v1/workshops/${ws.id}`);
    }
  });

  it('status of a server that does not answer exits 1 and says so', async () => {
    const r = await server.cli(['server', 'status', '--data-dir', join(scratch, 'none')], { env: { ATELIER_URL: 'http://127.0.0.1:1' } });
    assert.equal(r.code, 1);
    assert.match(r.stdout, /service: +no server running for/);
    assert.match(r.stdout, /server: +not answering: cannot reach the Atelier server at http:\/\/127\.0\.0\.1:1/);
  });
});
