// The postgres simulator's spare copies under a burst, and what a copy hands over: run against
// the real PostgreSQL and the `pg` client, as an unprivileged uid when the tests run as root.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { removeSimulator, startSimulator, warmSimulators, type SimulatorHandle, type StartTimings } from '../src/simulators/index.js';
import { RUN_AS, simulatorFixture } from './helpers/simulators.js';

const run = promisify(execFile);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('postgres simulator: bursts and spare copies', () => {
  const sim = simulatorFixture('postgres', () => warmSimulators({ cacheDir: sim.cacheDir, runAs: RUN_AS }));
  const pool = (): string =>
    join(
      sim.cacheDir,
      readdirSync(sim.cacheDir).find((e) => e.endsWith('.spares'))!,
    );
  const spares = (): string[] => readdirSync(pool()).filter((e) => e.startsWith('spare-'));

  const currentDatabase = async (h: SimulatorHandle): Promise<string> => {
    const c = new pg.Client({
      host: join(h.socketDir, h.name),
      port: h.endpoint.port,
      user: h.env.PGUSER,
      password: h.env.PGPASSWORD,
      database: h.env.PGDATABASE,
    });
    await c.connect();
    try {
      return (await c.query<{ d: string }>('SELECT current_database() AS d')).rows[0]!.d;
    } finally {
      await c.end();
    }
  };

  it('five starts at once all answer: those that find no spare wait for a copy, and the pool then keeps more', async (t) => {
    await warmSimulators({ cacheDir: sim.cacheDir, runAs: RUN_AS });
    const ready = spares().length;
    assert.equal(ready, 3, 'a warmed pool holds three spare copies');

    const count = ready + 2;
    const timings: StartTimings[] = [];
    const t0 = performance.now();
    const handles = await Promise.all(
      Array.from({ length: count }, (_, i) => {
        const timing: StartTimings = {};
        timings.push(timing);
        return startSimulator(sim.spec(`burst${i}`, { options: { database: `db${i}` } }), timing).then((h) => {
          sim.handles.push(h);
          return h;
        });
      }),
    );
    t.diagnostic(`${count} starts at once: all answered after ${(performance.now() - t0).toFixed(0)} ms`);
    assert.deepEqual(
      await Promise.all(handles.map(currentDatabase)),
      handles.map((_, i) => `db${i}`),
    );
    const waited = timings.filter((x) => x.waitedForCopyMs !== undefined);
    assert.equal(waited.length, count - ready, `starts that waited for a copy: ${JSON.stringify(timings)}`);

    // After a burst the pool refills beyond its usual three (BURST_SPARES).
    for (let i = 0; spares().length < 6; i++) {
      assert.ok(i < 1200, `the pool was refilled to ${spares().length} spare copies only`);
      await sleep(100);
    }
    for (const h of handles) await removeSimulator(h);
  });

  it("hands over the data directory alone: owned by the simulator's uid and closed to every other user", async (t) => {
    if (!RUN_AS) {
      t.skip('needs root: the simulator then runs as another uid than the tests');
      return;
    }
    const h = await sim.start(sim.spec('owned'));
    const data = join(h.dir, 'data');
    const st = statSync(data);
    assert.equal(st.uid, RUN_AS.uid);
    assert.equal(st.mode & 0o777, 0o700);
    // Inside, the template's files are open to all, but only through that directory: another
    // unprivileged uid cannot read them, nor the files PostgreSQL wrote itself.
    for (const file of ['PG_VERSION', 'global/pg_control', 'postmaster.pid']) {
      await assert.rejects(
        run('setpriv', ['--reuid=65533', '--regid=65533', '--clear-groups', '--', 'cat', join(data, file)]),
        /Permission denied/,
        file,
      );
    }
    // The simulator's own uid writes where PostgreSQL needs to (a table and a checkpoint).
    const c = new pg.Client({
      host: join(h.socketDir, h.name),
      port: 5432,
      user: h.env.PGUSER,
      password: h.env.PGPASSWORD,
      database: h.env.PGDATABASE,
    });
    await c.connect();
    try {
      await c.query('CREATE TABLE t AS SELECT g FROM generate_series(1, 10000) g');
      assert.equal((await c.query<{ n: string }>('SELECT count(*) AS n FROM t')).rows[0]!.n, '10000');
    } finally {
      await c.end();
    }
  });
});
