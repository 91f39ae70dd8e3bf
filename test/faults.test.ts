import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { REPO_ROOT, TestServer, makeRepo } from './helpers/server.js';
import { ExternalPostgres } from './helpers/postgres.js';

describe('faults', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  it('runs migrations once when two servers start at the same time on one database', async () => {
    const db = ExternalPostgres.start();
    cleanups.push(() => db.stop());
    // Replicas share the database and the master key file that protects its secrets.
    const keyDir = mkdtempSync('/tmp/atelier-key-');
    cleanups.push(() => rmSync(keyDir, { recursive: true, force: true }));
    const env = { ATELIER_MASTER_KEY_FILE: join(keyDir, 'master.key') };
    const [a, b] = await Promise.all([TestServer.start({ databaseUrl: db.url, env }), TestServer.start({ databaseUrl: db.url, env })]);
    cleanups.push(
      () => a.dispose(),
      () => b.dispose(),
    );
    // Only the server that won the race created the admin token; it is valid on both.
    const token = a.token || b.token;
    assert.match(token, /^atl_/, 'one of the two servers created the admin token');
    assert.ok(!(a.token && b.token), 'only one admin token is created');
    a.token = token;
    b.token = token;
    assert.equal((await fetch(`${a.url}/healthz`)).status, 200);
    assert.equal((await fetch(`${b.url}/healthz`)).status, 200);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const rows = (await client.query<{ version: string }>('SELECT version FROM schema_migrations ORDER BY version')).rows;
    await client.end();
    assert.deepEqual(
      rows.map((r) => r.version),
      readdirSync(join(REPO_ROOT, 'src', 'db', 'migrations'))
        .filter((f) => f.endsWith('.sql'))
        .sort(),
    );
    // A third server with its own (new) key file cannot read the database's secrets: it says how to fix it.
    const stray = new TestServer(mkdtempSync('/tmp/atelier-test-'), ['--database-url', db.url]);
    cleanups.push(() => stray.dispose());
    await assert.rejects(stray.boot(), /must share one key file \(ATELIER_MASTER_KEY_FILE\)/);
    // It stopped before joining: no node of its own that would look live (and be given workshops) for a while.
    const check = new pg.Client({ connectionString: db.url });
    await check.connect();
    const nodes = (await check.query<{ n: number }>('SELECT count(*)::int AS n FROM nodes')).rows[0]!.n;
    await check.end();
    assert.equal(nodes, 2, 'the stray server joined the installation before failing');
    // Either server drives every workshop, wherever it runs (docs/replicas.md; test/nodes.replicas.test.ts).
    const w = await a.createWorkshop({ repo: makeRepo() });
    const fromB = await b.api<{ exitCode: number }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['true'] });
    assert.equal(fromB.status, 200, JSON.stringify(fromB.body));
    assert.equal(fromB.body.exitCode, 0);
  });

  it('fails a workshop cleanly when the disk fills up during the clone, and recovers once space is back', async () => {
    const db = ExternalPostgres.start();
    cleanups.push(() => db.stop());
    // A 24 MiB disk for the server's data; the database lives elsewhere.
    const disk = mkdtempSync('/tmp/atelier-full-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=24m', 'tmpfs', disk]);
    cleanups.push(() => {
      execFileSync('umount', ['-l', disk]);
      rmSync(disk, { recursive: true, force: true });
    });
    const dataDir = join(disk, 'data');
    mkdirSync(dataDir);
    const server = new TestServer(dataDir, ['--database-url', db.url]);
    // The data dir's own filesystem fills up (a server without disk quotas, as rootless ones are):
    // with quotas, a workshop's own filesystem fills instead (test/quota.test.ts).
    server.serverEnv = { ATELIER_DISK_QUOTA: 'off', ATELIER_DISK_RESERVE: '0' };
    await server.boot();
    cleanups.push(() => server.dispose());

    const big = makeRepo({ 'README.md': 'big\n' });
    writeFileSync(join(big, 'blob.bin'), execFileSync('head', ['-c', String(40 << 20), '/dev/urandom'], { maxBuffer: 64 << 20 }));
    execFileSync(
      'git',
      ['-c', 'user.email=t@example.com', '-c', 'user.name=t', '-c', 'core.compression=0', 'commit', '-qam', 'big', '--allow-empty'],
      { cwd: big },
    );
    execFileSync('git', ['add', 'blob.bin'], { cwd: big });
    execFileSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', 'commit', '-qm', 'blob'], { cwd: big });

    const w = await server.createWorkshop({ repo: big });
    assert.equal(w.status, 'Failed');
    assert.match(w.statusReason ?? '', /disk is full/);
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    const del = await server.api('DELETE', `/v1/workshops/${w.id}`);
    assert.equal(del.status, 200);
    assert.ok(!existsSync(join(dataDir, 'workshops', w.id)));
    const small = await server.createWorkshop({ repo: makeRepo() });
    assert.equal(small.status, 'Running', small.statusReason ?? '');
  });
});
