import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer, makeRepo, processesNaming } from './helpers/server.js';

function sandboxProcesses(dataDir: string, id: string): number {
  return processesNaming(join(dataDir, 'workshops', id));
}

describe('server restarts', () => {
  const servers: TestServer[] = [];
  after(async () => {
    for (const s of servers) await s.dispose();
  });

  it('keeps running and suspended workshops across a clean restart and a kill -9', async () => {
    const server = await TestServer.start();
    servers.push(server);
    const repo = makeRepo();
    const running = await server.createWorkshop({ repo });
    const suspended = await server.createWorkshop({ repo });
    await server.exec(running.id, ['sh', '-c', 'sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/bg.pid']);

    await server.api('POST', `/v1/workshops/${suspended.id}/stop`);

    for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
      // An exec in flight when the server dies must not linger as an orphan.
      const inFlight = server
        .api('POST', `/v1/workshops/${running.id}/exec`, { command: ['sh', '-c', 'echo $$ > /tmp/inflight.pid; exec sleep 999'] })
        .catch(() => undefined);
      while ((await server.exec(running.id, ['sh', '-c', 'cat /tmp/inflight.pid 2>/dev/null || true'])).stdout === '') {
        await new Promise((r) => setTimeout(r, 20));
      }
      await server.stop(signal);
      // Workshops do not depend on the server process.
      assert.ok(sandboxProcesses(server.dataDir, running.id) > 0);
      await server.boot();
      const r = await server.api<{ status: string }>('GET', `/v1/workshops/${running.id}`);
      assert.equal(r.body.status, 'Running', signal);
      const s = await server.api<{ status: string }>('GET', `/v1/workshops/${suspended.id}`);
      assert.equal(s.body.status, 'Suspended', signal);
      const alive = await server.exec(running.id, ['sh', '-c', 'kill -0 $(cat /tmp/bg.pid) && echo same-process']);
      assert.equal(alive.stdout, 'same-process\n', signal);
      await inFlight;
      {
        const orphan = await server.exec(running.id, [
          'sh',
          '-c',
          // A killed process may stay a zombie for a moment: only a live one counts.
          'p=$(cat /tmp/inflight.pid); for i in 1 2 3 4 5 6 7 8 9 10; do grep -qs "^State:.*[RSD]" /proc/$p/status || { echo gone; exit; }; sleep 0.1; done; echo still-running',
        ]);
        assert.equal(orphan.stdout, 'gone\n', signal);
        await server.exec(running.id, ['rm', '/tmp/inflight.pid']);
      }
    }
    const resumed = await server.api<{ status: string }>('POST', `/v1/workshops/${suspended.id}/resume`);
    assert.equal(resumed.body.status, 'Running');
  });

  it('after kill -9 in the middle of creates, each workshop is fully there or cleanly Failed, with no orphans', async () => {
    const server = await TestServer.start();
    servers.push(server);
    const slow = makeRepo({ '.devcontainer.json': '{ "postCreateCommand": "sleep 30" }' });
    const fast = makeRepo();
    const creating = server.api('POST', '/v1/workshops', { repo: slow, name: 'interrupted' }).catch(() => undefined);
    const done = await server.createWorkshop({ repo: fast, name: 'complete' });
    // Wait until the slow one is in its postCreateCommand, then kill the server.
    const deadline = Date.now() + 20_000;
    let building: { id: string } | undefined;
    while (!building && Date.now() < deadline) {
      const list = await server.api<{ items: { id: string; name: string; status: string }[] }>('GET', '/v1/workshops');
      building = list.body.items.find((w) => w.name === 'interrupted' && w.status === 'Building');
      if (building && sandboxProcesses(server.dataDir, building.id) === 0) building = undefined;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(building, 'the slow workshop reached its build');
    await server.stop('SIGKILL');
    await creating;
    await server.boot();

    const interrupted = await server.api<{ status: string; statusReason: string }>('GET', `/v1/workshops/${building.id}`);
    assert.equal(interrupted.body.status, 'Failed');
    assert.match(interrupted.body.statusReason, /server stopped while this workshop was being created/);
    assert.equal(sandboxProcesses(server.dataDir, building.id), 0, 'no orphan process');
    const complete = await server.api<{ status: string }>('GET', `/v1/workshops/${done.id}`);
    assert.equal(complete.body.status, 'Running');
    assert.equal((await server.exec(done.id, ['true'])).exitCode, 0);
    const del = await server.api('DELETE', `/v1/workshops/${building.id}`);
    assert.equal(del.status, 200);
    assert.ok(!existsSync(join(server.dataDir, 'workshops', building.id)));
  });

  it('removes directories and cgroups that no workshop claims', async () => {
    const server = await TestServer.start();
    servers.push(server);
    const w = await server.createWorkshop({ repo: makeRepo() });
    await server.stop('SIGKILL');
    // Simulate a row lost with its sandbox still around (e.g. a restored database backup).
    const pgsock = join(server.dataDir, 'pgsock');
    execFileSync('psql', ['-h', pgsock, '-U', 'atelier', '-d', 'atelier', '-c', `DELETE FROM workshops WHERE id = '${w.id}'`], {
      stdio: 'ignore',
    });
    await server.boot();
    assert.equal(sandboxProcesses(server.dataDir, w.id), 0);
    assert.ok(!existsSync(join(server.dataDir, 'workshops', w.id)));
  });

  it('answers 503 while the embedded database is down and recovers by itself', async () => {
    const server = await TestServer.start();
    servers.push(server);
    const pgDir = join(server.dataDir, 'pg');
    const pgCtl = join(
      readdirSync('/usr/lib/postgresql')
        .sort()
        .reverse()
        .map((v) => `/usr/lib/postgresql/${v}/bin`)[0]!,
      'pg_ctl',
    );
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    // Not execFileSync: a test process blocked for the seconds pg_ctl takes on a busy machine
    // misses the server closing its idle keep-alive connection, and the next request reuses the
    // closed socket ("fetch failed").
    await promisify(execFile)(pgCtl, ['-D', pgDir, '-m', 'immediate', 'stop'], { uid, gid, cwd: '/' });
    const down = await server.api<{ code: string }>('GET', '/v1/workshops');
    assert.equal(down.status, 503);
    assert.equal(down.body.code, 'DATABASE_UNAVAILABLE');
    const deadline = Date.now() + 20_000;
    let status = 0;
    while (Date.now() < deadline) {
      status = (await server.api('GET', '/v1/workshops')).status;
      if (status === 200) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(status, 200, 'recovered without a restart');
  });

  it('says which directory keeps the embedded PostgreSQL from its data dir', () => {
    const parent = mkdtempSync('/tmp/atelier-closed-');
    try {
      const out = execFileSync(
        'sh',
        ['-c', `node bin/atelier server start --data-dir ${parent}/data --listen 127.0.0.1:0 2>&1; echo rc=$?`],
        {
          env: { ...process.env, ATELIER_CONFIG_DIR: `${parent}/config` },
        },
      ).toString();
      assert.match(out, new RegExp(`cannot enter ${parent}`));
      assert.match(out, /chmod o\+x/);
      assert.match(out, /rc=1/);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it('refuses a second server on the same data dir', async () => {
    const server = await TestServer.start();
    servers.push(server);
    const out = execFileSync('sh', [
      '-c',
      `node bin/atelier server start --data-dir ${server.dataDir} --listen 127.0.0.1:0 2>&1; echo rc=$?`,
    ]).toString();
    assert.match(out, /already uses/);
    assert.match(out, /rc=1/);
  });
});
