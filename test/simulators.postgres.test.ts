// The postgres simulator against real peers: the `pg` client and `psql` over its unix socket,
// run as an unprivileged uid when the tests run as root (PostgreSQL refuses root).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { AtelierError } from '../src/core/index.js';
import {
  isAlive,
  removeSimulator,
  resetSimulator,
  simulatorLogs,
  startSimulator,
  stopSimulator,
  type SimulatorHandle,
  warmSimulators,
} from '../src/simulators/index.js';
import { median, tcpListeners, uidOf, withChildren } from './helpers/proc.js';
import { assertSandboxed, processesMounting, RUN_AS, simulatorFixture } from './helpers/simulators.js';
import { REPO_ROOT } from './helpers/server.js';
import { simulatorSandboxArgv } from '../src/sandbox/index.js';

const run = promisify(execFile);

describe('postgres simulator', () => {
  // Waits for the background refill of spare copies to finish before deleting under it.
  const sim = simulatorFixture('postgres', () => warmSimulators({ cacheDir: sim.cacheDir, runAs: RUN_AS }));
  const { spec, start, handles } = sim;

  const client = (h: SimulatorHandle, over: Partial<pg.ClientConfig> = {}): pg.Client =>
    new pg.Client({
      host: join(h.socketDir, h.name),
      port: h.endpoint.port,
      user: h.env.PGUSER,
      password: h.env.PGPASSWORD,
      database: h.env.PGDATABASE,
      ...over,
    });

  const query = async (h: SimulatorHandle, sql: string, over: Partial<pg.ClientConfig> = {}): Promise<pg.QueryResult> => {
    const c = client(h, over);
    await c.connect();
    try {
      return await c.query(sql);
    } finally {
      await c.end();
    }
  };

  it('creates the template once even when first uses race, then starts fast from copies (timings logged)', async (t) => {
    const t0 = performance.now();
    const [a, b] = await Promise.all([start(spec('race-a')), start(spec('race-b'))]);
    t.diagnostic(`two concurrent first starts (initdb of the template + copy + start): ${(performance.now() - t0).toFixed(0)} ms`);
    assert.deepEqual(
      readdirSync(sim.cacheDir).filter((e) => e.startsWith('template-') && !e.endsWith('.spares')),
      ['template-pg15-v3'],
    );
    assert.equal((await query(a, 'SELECT 1 AS one')).rows[0].one, 1);
    assert.equal((await query(b, 'SELECT 1 AS one')).rows[0].one, 1);
    await stopSimulator(a);
    await stopSimulator(b);

    // Fill the spare copies as a server does at boot: starts then rename a copy instead of making one.
    const w0 = performance.now();
    await warmSimulators({ cacheDir: sim.cacheDir, runAs: RUN_AS });
    t.diagnostic(`warmSimulators (spare copies): ${(performance.now() - w0).toFixed(0)} ms`);
    assert.ok(
      readdirSync(join(sim.cacheDir, 'template-pg15-v3.spares')).filter((e) => e.startsWith('spare-')).length >= 2,
      'spare copies are kept ready',
    );

    const startTimes: number[] = [];
    const firstQuery: number[] = [];
    for (let i = 0; i < 10; i++) {
      const s0 = performance.now();
      const h = await start(spec(`timing${i}`));
      const s1 = performance.now();
      await query(h, 'SELECT 1');
      firstQuery.push(performance.now() - s0);
      startTimes.push(s1 - s0);
      await removeSimulator(h);
    }
    t.diagnostic(
      `copy + start + role/database, 10 starts: p50 ${median(startTimes).toFixed(0)} ms, ` +
        `max ${Math.max(...startTimes).toFixed(0)} ms; request → first query p50 ${median(firstQuery).toFixed(0)} ms`,
    );
  });

  it('honours POSTGRES_DB, POSTGRES_USER and POSTGRES_PASSWORD for the pg client and psql, and refuses a wrong password', async () => {
    const h = await start(
      spec('postgres', { version: '15', env: { POSTGRES_DB: 'orders_test', POSTGRES_USER: 'dev', POSTGRES_PASSWORD: 'devpassword' } }),
    );
    assert.equal(h.env.DATABASE_URL, 'postgresql://dev:devpassword@postgres.atelier.internal:5432/orders_test');
    assert.deepEqual(h.endpoint, { host: 'postgres.atelier.internal', port: 5432 });
    assert.equal(h.socket, join(sim.socketDir, 'postgres', '.s.PGSQL.5432'));
    assert.equal(h.socketName, 'postgres/.s.PGSQL.5432');

    const who = await query(
      h,
      'SELECT current_user AS u, current_database() AS d, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS su',
    );
    assert.deepEqual(who.rows[0], { u: 'dev', d: 'orders_test', su: false });
    // The workshop's user owns its database: it can create tables and databases.
    await query(h, 'CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)');
    await query(h, 'CREATE DATABASE scratch');

    const psql = await run(
      'psql',
      ['-h', join(sim.socketDir, 'postgres'), '-U', 'dev', '-d', 'orders_test', '-Atc', 'SELECT count(*) FROM t'],
      {
        env: { PATH: process.env.PATH, PGPASSWORD: 'devpassword' },
      },
    );
    assert.equal(psql.stdout.trim(), '1');

    await assert.rejects(query(h, 'SELECT 1', { password: 'wrong' }), (err: Error & { code?: string }) => err.code === '28P01');
    await assert.rejects(
      run('psql', ['-h', join(sim.socketDir, 'postgres'), '-U', 'dev', '-d', 'orders_test', '-w', '-Atc', 'SELECT 1'], {
        env: { PATH: process.env.PATH, PGPASSWORD: 'nope' },
      }),
      /password authentication failed/,
    );
    // No password-less way in, not even for the bootstrap superuser.
    await assert.rejects(
      run('psql', ['-h', join(sim.socketDir, 'postgres'), '-U', 'atelier_admin', '-d', 'postgres', '-w', '-Atc', 'SELECT 1'], {
        env: { PATH: process.env.PATH },
      }),
      /password/,
    );
  });

  it('gives the workshop no superuser unless asked: programs on the host stay out of reach', async () => {
    const h = await start(spec('nosuper', { env: { POSTGRES_PASSWORD: 'pw' } }));
    assert.equal(h.env.PGUSER, 'postgres');
    assert.equal(h.env.PGDATABASE, 'postgres');
    await assert.rejects(query(h, "COPY (SELECT 1) TO PROGRAM 'true'"), /permission denied|must be superuser|pg_execute_server_program/);
    await assert.rejects(query(h, "SELECT pg_read_file('/etc/passwd')"), /permission denied/);

    const su = await start(spec('super', { options: { database: 'app', user: 'admin', password: 'x', superuser: true } }));
    assert.equal((await query(su, 'SELECT rolsuper FROM pg_roles WHERE rolname = current_user')).rows[0].rolsuper, true);
  });

  it('runs as the unprivileged uid, listens on no TCP port, and survives the process that started it', async () => {
    // Start from another Node process that then exits, as a server restart would.
    const script = join(sim.base, 'start.mts');
    writeFileSync(
      script,
      `import { startSimulator } from ${JSON.stringify(join(REPO_ROOT, 'src/simulators/index.ts'))};\n` +
        `import { simulatorSandboxArgv } from ${JSON.stringify(join(REPO_ROOT, 'src/sandbox/index.ts'))};\n` +
        `const h = await startSimulator({ ...${JSON.stringify(spec('detached', { env: { POSTGRES_PASSWORD: 'pw' } }))}, sandbox: simulatorSandboxArgv });\n` +
        'process.stdout.write(JSON.stringify(h));\n',
    );
    const out = await run(process.execPath, ['--import', 'tsx', script], { cwd: REPO_ROOT });
    const h = JSON.parse(out.stdout) as SimulatorHandle;
    handles.push(h);
    assert.ok(isAlive(h), 'the simulator outlived the process that started it');
    assert.equal((await query(h, 'SELECT 2 AS two')).rows[0].two, 2);
    const program = assertSandboxed(h);
    // Its socket and its directory are its owner's only (the server's relay dials it).
    assert.equal(statSync(h.socket).mode & 0o777, 0o700);
    assert.equal(statSync(join(h.socketDir, h.name)).mode & 0o777, 0o700);
    if (RUN_AS)
      for (const p of withChildren(program)) {
        const uid = uidOf(p);
        if (uid !== undefined) assert.equal(uid, RUN_AS.uid);
      }
    assert.ok(withChildren(program).length > 1, 'the postmaster has started its workers');
    assert.deepEqual(tcpListeners(withChildren(program)), []);
    assert.equal((await query(h, 'SHOW listen_addresses')).rows[0].listen_addresses, '');
    assert.equal((await query(h, 'SHOW fsync')).rows[0].fsync, 'off');

    // A handle whose start time does not match (a reused pid) is never signalled.
    await stopSimulator({ ...h, startTime: '1' });
    assert.ok(isAlive(h));

    const members = withChildren(h.pid);
    await stopSimulator(h);
    assert.equal(isAlive(h), false);
    // Nothing is left of the postmaster nor of its workers (zombies waiting for init aside).
    const left = members.filter((p) => {
      try {
        return !/^State:\s+Z/m.test(readFileSync(`/proc/${p}/status`, 'utf8'));
      } catch {
        return false;
      }
    });
    assert.deepEqual(left, [], 'no process of the simulator is left');
    assert.equal(existsSync(h.socket), false);
    assert.match(await simulatorLogs(h, { tailBytes: 4000 }), /database system is shut down|shutting down/);
  });

  it('reset returns to a fresh database with the same user, database and password', async (t) => {
    const h = await start(spec('resettable', { env: { POSTGRES_DB: 'shop', POSTGRES_USER: 'app', POSTGRES_PASSWORD: 's3cret' } }));
    await query(h, "CREATE TABLE orders (id serial, item text); INSERT INTO orders (item) VALUES ('book')");
    assert.equal((await query(h, 'SELECT count(*)::int AS n FROM orders')).rows[0].n, 1);

    const r0 = performance.now();
    const fresh = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    const resetMs = performance.now() - r0;
    handles.push(fresh);
    assert.equal(isAlive(h), false);
    assert.ok(isAlive(fresh));
    assert.deepEqual(fresh.env, h.env);
    await assert.rejects(query(fresh, 'SELECT * FROM orders'), /relation "orders" does not exist/);
    assert.equal((await query(fresh, 'SELECT current_user AS u, current_database() AS d')).rows[0].u, 'app');
    t.diagnostic(`reset (stop, fresh copy, start, role and database): ${resetMs.toFixed(0)} ms`);
  });

  it('runs two instances side by side in one socket directory without sharing anything, and refuses a name in use', async () => {
    const one = await start(spec('one', { env: { POSTGRES_PASSWORD: 'a' } }));
    const two = await start(spec('two', { env: { POSTGRES_PASSWORD: 'b' } }));
    await query(one, 'CREATE TABLE only_in_one (x int)');
    await assert.rejects(query(two, 'SELECT * FROM only_in_one'), /does not exist/);
    assert.notEqual(one.socket, two.socket);

    await assert.rejects(start(spec('one', { env: { POSTGRES_PASSWORD: 'c' } })), (err: AtelierError) => err.code === 'ALREADY_EXISTS');
    // The running instance is untouched by the refused one.
    await query(one, 'SELECT * FROM only_in_one');
  });

  it('refuses versions it does not have, naming the installed one, and bad settings, before starting anything', async () => {
    await assert.rejects(startSimulator(spec('v16', { version: '16-alpine' })), (err: AtelierError) => {
      assert.equal(err.code, 'UNSUPPORTED');
      assert.match(err.message, /PostgreSQL 16-alpine is not installed.*installed: 15 \(15\.\d+\)/);
      return true;
    });
    await assert.rejects(startSimulator(spec('bad', { version: 'newest' })), (err: AtelierError) => err.code === 'INVALID_ARGUMENT');
    await assert.rejects(
      startSimulator(spec('bad', { env: { PGDATA: '/x' } })),
      /unknown env PGDATA \(known: POSTGRES_DB, POSTGRES_USER, POSTGRES_PASSWORD\)/,
    );
    await assert.rejects(startSimulator(spec('bad', { env: { POSTGRES_USER: 'atelier_admin' } })), /reserved/);
    await assert.rejects(startSimulator(spec('bad', { options: { superuser: 'yes' } })), /superuser must be true or false/);
    assert.equal(existsSync(join(sim.base, 'services', 'v16')), false);
    assert.equal(existsSync(join(sim.base, 'services', 'bad')), false);
  });

  it('says what failed, with the log tail, and leaves no process when the start deadline passes', async () => {
    const s = spec('slow', { env: { POSTGRES_PASSWORD: 'pw' }, startTimeoutMs: 1 });
    await assert.rejects(startSimulator(s), (err: AtelierError) => {
      assert.equal(err.code, 'UNAVAILABLE');
      assert.match(err.message, /postgres simulator slow did not start: .*no answer within 1 ms/);
      return true;
    });
    assert.deepEqual(processesMounting(join(s.dir, 'data')), []);
  });

  it('starts under a directory its uid cannot enter: its sandbox is given its data, not the path to it', async () => {
    const closed = mkdtempSync(join(sim.base, 'closed-'));
    chmodSync(closed, 0o700);
    const h = await start(spec('closed', { dir: join(closed, 'pg'), env: { POSTGRES_PASSWORD: 'pw' } }));
    assert.equal((await query(h, 'SELECT 3 AS three')).rows[0].three, 3);
    assertSandboxed(h);
    await removeSimulator(h);
    assert.equal(existsSync(join(closed, 'pg')), false);
  });
});
