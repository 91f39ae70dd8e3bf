import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer, killStrays, makeRepo } from './helpers/server.js';

interface Disk {
  enforced: boolean;
  quotaBytes: number | null;
  usedBytes: number | null;
  note: string | null;
}

const MiB = 2 ** 20;

/** Mount points under `dir` in the server's (host's) mount namespace. */
function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${dir}/`));
}

describe('disk quotas (root: a filesystem of its own per workshop)', () => {
  let server: TestServer;
  let repo: string;
  let small: string;
  let other: string;

  before(async () => {
    // A small default so that the spare path (default size) is filled quickly too.
    server = await TestServer.start({ env: { ATELIER_DEFAULT_DISK: '160m', ATELIER_MAX_DISK: '1g' } });
    repo = makeRepo();
    // 128m: made on demand (not the spares' size); the other takes the spare of the default size.
    const a = await server.createWorkshop({ repo, disk: '128m' });
    assert.equal(a.status, 'Running', a.statusReason ?? '');
    small = a.id;
    const b = await server.createWorkshop({ repo });
    assert.equal(b.status, 'Running', b.statusReason ?? '');
    other = b.id;
  });
  after(async () => {
    await server?.dispose();
  });

  it('says at start how workshops get their quota', () => {
    assert.match(server.log, /disk quotas: a filesystem of its own per workshop \(default 160\.0m, at most 1\.0g\); 2\.0g kept free/);
  });

  it('stops writes to /workspace, /tmp and the home at the quota with ENOSPC, one quota for all three', async () => {
    for (const dir of ['/workspace', '/tmp', '/home/atelier']) {
      const r = await server.exec(small, [
        'sh',
        '-c',
        `dd if=/dev/zero of=${dir}/fill bs=1M count=400 2>&1; echo rc=$?; rm -f ${dir}/fill`,
      ]);
      assert.match(r.stdout, /No space left on device/, `${dir}: ${r.stdout}`);
      assert.match(r.stdout, /rc=1/, `${dir}: ${r.stdout}`);
    }
    // 50m in each: the three share the workshop's 128m.
    const r = await server.exec(small, [
      'sh',
      '-c',
      'for d in /workspace /tmp /home/atelier; do dd if=/dev/zero of=$d/part bs=1M count=50 2>/dev/null && echo "$d ok" || echo "$d full"; done',
    ]);
    assert.equal(r.stdout, '/workspace ok\n/tmp ok\n/home/atelier full\n');
  });

  it('keeps the server, its database and other workshops working while one workshop is full', async () => {
    // Full to the last byte.
    await server.exec(small, ['sh', '-c', 'dd if=/dev/zero of=/tmp/rest bs=1M count=400 2>/dev/null; true']);
    const full = await server.api<{ disk: Disk }>('GET', `/v1/workshops/${small}`);
    assert.equal(full.status, 200);
    const d = full.body.disk;
    assert.equal(d.enforced, true);
    assert.ok(d.quotaBytes! > 100 * MiB && d.quotaBytes! <= 128 * MiB, JSON.stringify(d));
    assert.ok(d.usedBytes! > 0.95 * d.quotaBytes!, JSON.stringify(d));
    // The full workshop still runs commands (reads, deletes).
    assert.equal((await server.exec(small, ['sh', '-c', 'ls /workspace >/dev/null && echo alive'])).stdout, 'alive\n');
    // Another workshop writes and runs.
    const w = await server.exec(other, [
      'sh',
      '-c',
      'dd if=/dev/zero of=/workspace/ten bs=1M count=10 2>/dev/null && stat -c %s /workspace/ten',
    ]);
    assert.equal(w.stdout, `${10 * MiB}\n`);
    // The database takes writes: a new workshop is recorded, built and removed.
    const c = await server.createWorkshop({ repo, disk: '64m' });
    assert.equal(c.status, 'Running', c.statusReason ?? '');
    assert.equal((await server.api('DELETE', `/v1/workshops/${c.id}`)).status, 200);
  });

  it('shows usage against the quota in `workshops status`', async () => {
    const r = await server.cli(['workshops', 'status', other]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /disk:?\s+1\d\.\dm of 1[45]\d\.\dm used \(\d+%\)/);
    const list = await server.api<{ items: { id: string; disk: Disk }[] }>('GET', '/v1/workshops');
    const entry = list.body.items.find((i) => i.id === other)!;
    assert.ok(entry.disk.usedBytes! >= 10 * MiB, JSON.stringify(entry.disk));
  });

  it('refuses a quota over the maximum or malformed, with the field and what to ask for', async () => {
    const big = await server.api<{ code: string; message: string; details: { field: string } }>('POST', '/v1/workshops', {
      repo,
      disk: '2g',
    });
    assert.equal(big.status, 400);
    assert.equal(big.body.code, 'INVALID_ARGUMENT');
    assert.equal(big.body.details.field, 'disk');
    assert.match(big.body.message, /more than this server allows \(1\.0g, its ATELIER_MAX_DISK\)/);
    const cli = await server.cli(['workshops', 'create', '--repo', repo, '--disk', '5g']);
    assert.notEqual(cli.code, 0);
    assert.match(cli.stderr, /disk 5g is more than this server allows/);
    const bad = await server.api<{ code: string; message: string }>('POST', '/v1/workshops', { repo, disk: 'lots' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.message, /disk "lots" is not a size/);
  });

  it('after a restart (kill -9) quotas still hold, and a nearly full data dir refuses new workshops', async () => {
    await server.stop('SIGKILL');
    // Keeping more than the disk has for the database: the data dir counts as nearly full.
    server.serverEnv = { ...server.serverEnv, ATELIER_DISK_RESERVE: '1000t' };
    await server.boot();
    const r = await server.exec(small, ['sh', '-c', 'rm -f /tmp/rest; dd if=/dev/zero of=/tmp/again bs=1M count=400 2>&1; echo rc=$?']);
    assert.match(r.stdout, /No space left on device/);
    const refused = await server.api<{ code: string; message: string }>('POST', '/v1/workshops', { repo });
    assert.equal(refused.status, 507);
    assert.equal(refused.body.code, 'INSUFFICIENT_STORAGE');
    assert.match(
      refused.body.message,
      /nearly full: .* kept for the server's database \(ATELIER_DISK_RESERVE\).*delete workshops you no longer need/,
    );
    const list = await server.api<{ items: unknown[] }>('GET', '/v1/workshops');
    assert.equal(list.body.items.length, 2, 'a refused create leaves no workshop behind');
  });

  it('after a host reboot (sandboxes and mounts gone) the workshop gets its own filesystem back, files kept', async () => {
    const root = join(server.dataDir, 'workshops', small);
    await server.stop();
    // What a reboot leaves: no process of the workshop, nothing mounted under the data dir.
    killStrays(server.dataDir);
    assert.deepEqual(mountsUnder(server.dataDir), []);
    server.serverEnv = { ...server.serverEnv, ATELIER_DISK_RESERVE: '1g' };
    await server.boot();
    // A sandbox lost while the server was away is shown Dead at boot; resume starts it again, files kept.
    const dead = await server.api<{ status: string }>('GET', `/v1/workshops/${small}`);
    assert.equal(dead.body.status, 'Dead');
    assert.equal((await server.api('POST', `/v1/workshops/${small}/resume`)).status, 200);
    assert.ok(mountsUnder(server.dataDir).includes(root), mountsUnder(server.dataDir).join(' '));
    const r = await server.exec(small, [
      'sh',
      '-c',
      'test -f /tmp/again && echo kept; dd if=/dev/zero of=/workspace/more bs=1M count=400 2>&1; echo rc=$?',
    ]);
    assert.match(r.stdout, /^kept\n/);
    assert.match(r.stdout, /No space left on device/);
    const d = (await server.api<{ disk: Disk }>('GET', `/v1/workshops/${small}`)).body.disk;
    assert.ok(d.enforced && d.quotaBytes! <= 128 * MiB, JSON.stringify(d));
  });

  it('removes the workshop filesystem with the workshop', async () => {
    const root = join(server.dataDir, 'workshops', small);
    assert.ok(mountsUnder(server.dataDir).includes(root));
    assert.equal((await server.api('DELETE', `/v1/workshops/${small}`)).status, 200);
    assert.ok(!mountsUnder(server.dataDir).includes(root));
    assert.ok(!existsSync(join(server.dataDir, 'disks', `${small}.img`)));
    assert.ok(!existsSync(root));
  });
});
