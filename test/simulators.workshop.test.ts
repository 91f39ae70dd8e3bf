import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer, makeRepo } from './helpers/server.js';
import { processesMounting } from './helpers/simulators.js';

// Simulators wired into real workshops: declared in atelier.yaml or given at create, requested
// live, reached from inside the sandbox by name (plain TCP through /etc/hosts, and through the
// egress proxy) with the real psql, redis-cli and pg clients; listed, logged, reset, restarted
// after a crash, and gone with the workshop.

interface Sim {
  name: string;
  type: string;
  status: string;
  statusReason: string | null;
  endpoint: { host: string; port: number } | null;
  env: Record<string, string>;
  restarts: number;
  memoryBytes: number | null;
}

/** A live process (a zombie waiting for init to reap it is not). */
const alive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]!);
  } catch {
    return false;
  }
};

/** The live processes of the simulator whose data is under `dir` running `program` (from the sandbox it was given to). */
function simulatorPids(dir: string, program?: string): number[] {
  return processesMounting(dir).filter((p) => {
    if (!program) return true;
    try {
      return readFileSync(`/proc/${p}/comm`, 'utf8').trim() === program;
    } catch {
      return false;
    }
  });
}

describe('simulators in a workshop', () => {
  let server: TestServer;
  let ws: string;

  before(async () => {
    server = await TestServer.start();
    const repo = makeRepo({
      'atelier.yaml': ['simulators:', '  - name: postgres', '    env:', '      POSTGRES_DB: testdb', '      POSTGRES_USER: dev', ''].join(
        '\n',
      ),
    });
    const r = await server.cli(['workshops', 'create', '--repo', repo, '--name', 'sims', '--simulator', 'redis', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const w = JSON.parse(r.stdout) as { id: string; status: string; statusReason: string | null };
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
  });

  after(async () => {
    await server?.dispose();
  });

  async function list(): Promise<Sim[]> {
    const r = await server.api<{ items: Sim[] }>('GET', `/v1/workshops/${ws}/simulators`);
    assert.equal(r.status, 200);
    return r.body.items;
  }

  it('starts the declared and given simulators with the workshop and lists them', async () => {
    const items = await list();
    assert.deepEqual(
      items.map((s) => [s.name, s.type, s.status]),
      [
        ['postgres', 'postgres', 'Running'],
        ['redis', 'redis', 'Running'],
      ],
      JSON.stringify(items),
    );
    assert.deepEqual(items[0]!.endpoint, { host: 'postgres.atelier.internal', port: 5432 });
    assert.ok((items[0]!.memoryBytes ?? 0) > 0, 'memory use is reported');
    const cli = await server.cli(['simulators', 'list', ws]);
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(cli.stdout, /postgres\s+postgres\s+\S+\s+Running\s+postgres\.atelier\.internal:5432/);
  });

  it('shows simulator credentials only to those who may operate the workshop, redacted for the others', async () => {
    const post = async <T>(path: string, body: unknown): Promise<T> => {
      const r = await server.api<T>('POST', path, body);
      assert.ok(r.status === 201 || r.status === 200, `${path}: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body;
    };
    for (const [name, role] of [
      ['reader', 'viewer'],
      ['bystander', 'member'],
      ['keeper', 'maintainer'],
    ] as const)
      await post('/v1/users', { name, role });
    const token = async (user: string): Promise<string> =>
      (await post<{ token: string }>('/v1/tokens', { user, expiresInSeconds: 600 })).token;
    const agentViewer = (await post<{ token: string }>('/v1/tokens', { workshopId: ws, role: 'viewer', expiresInSeconds: 600 })).token;
    const listAs = async (t: string): Promise<Sim[]> => {
      const r = await server.api<{ items: Sim[] }>('GET', `/v1/workshops/${ws}/simulators`, undefined, { authorization: `Bearer ${t}` });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.items;
    };
    const full = (await list()).find((x) => x.name === 'postgres')!;
    const password = full.env.PGPASSWORD!;
    assert.ok(password && password !== '(redacted)');
    // The workshop's creator (admin here) and a maintainer of its tenant see them.
    for (const t of [server.token, await token('keeper')]) {
      const pg = (await listAs(t)).find((x) => x.name === 'postgres')!;
      assert.equal(pg.env.PGPASSWORD, password);
    }
    // A viewer, a member who does not own it and a read-only agent token do not.
    for (const t of [await token('reader'), await token('bystander'), agentViewer]) {
      const items = await listAs(t);
      const text = JSON.stringify(items);
      assert.ok(!text.includes(password), 'the password shows');
      const pg = items.find((x) => x.name === 'postgres')!;
      assert.equal(pg.env.PGPASSWORD, '(redacted)');
      assert.equal(pg.env.DATABASE_URL, full.env.DATABASE_URL!.replace(`:${encodeURIComponent(password)}@`, ':(redacted)@'));
      assert.equal(pg.env.PGUSER, 'dev', 'what is not a credential still shows');
      assert.equal(items.find((x) => x.name === 'redis')!.env.REDIS_URL, 'redis://redis.atelier.internal:6379');
    }
  });

  it('psql and redis-cli reach them by name from inside, with the connection details in the environment', async () => {
    const pg = await server.exec(ws, ['sh', '-c', 'psql "$DATABASE_URL" -Atc "select current_database(), current_user, 6*7"']);
    assert.equal(pg.exitCode, 0, pg.stderr);
    assert.equal(pg.stdout.trim(), 'testdb|dev|42');
    // The database asked for, owned by the user asked for; nothing of the template's making left over.
    const dbs = await server.exec(ws, [
      'sh',
      '-c',
      `psql "$DATABASE_URL" -Atc "select datname || ':' || pg_get_userbyid(datdba) from pg_database where not datistemplate order by 1"`,
    ]);
    assert.deepEqual(dbs.stdout.trim().split('\n'), ['postgres:atelier_admin', 'testdb:dev'], dbs.stderr);
    const byName = await server.exec(ws, [
      'sh',
      '-c',
      'PGPASSWORD="$PGPASSWORD" psql -h postgres.atelier.internal -U dev -d testdb -Atc "select 1"',
    ]);
    assert.equal(byName.exitCode, 0, byName.stderr);
    const redis = await server.exec(ws, [
      'sh',
      '-c',
      'redis-cli -h redis.atelier.internal PING && redis-cli -h redis.atelier.internal SET k v && redis-cli -h redis.atelier.internal GET k',
    ]);
    assert.equal(redis.exitCode, 0, redis.stderr);
    assert.equal(redis.stdout.trim().split('\n').join(' '), 'PONG OK v');
    // The API from inside, as this workshop's agent (ATELIER_URL, ATELIER_TOKEN).
    const who = await server.exec(ws, ['sh', '-c', 'curl -sf -H "authorization: Bearer $ATELIER_TOKEN" "$ATELIER_URL/v1/auth/whoami"']);
    assert.equal(who.exitCode, 0, who.stderr);
    assert.deepEqual((({ kind, workshopId }) => ({ kind, workshopId }))(JSON.parse(who.stdout) as { kind: string; workshopId: string }), {
      kind: 'agent',
      workshopId: ws,
    });
    const json = await server.exec(ws, ['cat', '/run/atelier/simulators.json']);
    const doc = JSON.parse(json.stdout) as { simulators: Array<{ name: string; host: string; port: number; env: Record<string, string> }> };
    assert.deepEqual(
      doc.simulators.map((s) => `${s.name}@${s.host}:${s.port}`),
      ['postgres@postgres.atelier.internal:5432', 'redis@redis.atelier.internal:6379'],
    );
    assert.equal(doc.simulators[1]!.env.REDIS_URL, 'redis://redis.atelier.internal:6379');
  });

  it('the pg client (node) reaches postgres.atelier.internal from inside', async () => {
    // The repository's own `pg` package, copied into the workspace as an agent's project would have it.
    const pgDir = join(process.cwd(), 'node_modules');
    const files: string[] = [];
    for (const p of [
      'pg',
      'pg-protocol',
      'pg-types',
      'pg-connection-string',
      'pg-pool',
      'pgpass',
      'pg-int8',
      'postgres-array',
      'postgres-bytea',
      'postgres-date',
      'postgres-interval',
      'split2',
      'xtend',
      'pg-cloudflare',
    ])
      if (existsSync(join(pgDir, p))) files.push(p);
    const tar = execFileSync('tar', ['-C', pgDir, '-cf', '-', ...files], { maxBuffer: 64 << 20 });
    const up = await server.exec(ws, ['sh', '-c', 'mkdir -p node_modules && tar -C node_modules -xf -'], { stdin: tar.toString('base64') });
    assert.equal(up.exitCode, 0, up.stderr);
    const script =
      "const {Client}=require('pg');const c=new Client({connectionString:process.env.DATABASE_URL});" +
      "c.connect().then(()=>c.query('select $1::int + 1 as n',[41])).then(r=>{console.log(r.rows[0].n);return c.end()}).catch(e=>{console.error(e.message);process.exit(1)})";
    const r = await server.exec(ws, ['node', '-e', script]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout.trim(), '42');
  });

  it('internal names also work through the egress proxy (CONNECT), and unknown ones are refused there', async () => {
    const py = [
      'import socket,sys',
      's=socket.create_connection(("127.0.0.1",3128))',
      's.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (sys.argv[1],sys.argv[1])).encode())',
      'head=s.recv(4096).decode()',
      'print(head.split("\\r\\n")[0])',
      'if " 200 " in head:',
      '  s.sendall(b"PING\\r\\n"); print(s.recv(100).decode().strip())',
    ].join('\n');
    const ok = await server.exec(ws, ['/usr/bin/python3', '-c', py, 'redis.atelier.internal:6379']);
    assert.equal(ok.exitCode, 0, ok.stderr);
    assert.deepEqual(ok.stdout.trim().split('\n'), ['HTTP/1.1 200 Connection Established', '+PONG']);
    const bad = await server.exec(ws, ['/usr/bin/python3', '-c', py, 'nothing.atelier.internal:6379']);
    assert.match(bad.stdout, /HTTP\/1.1 502/);
    const log = await server.api<{ items: Array<{ host: string; reason: string }> }>('GET', `/v1/workshops/${ws}/egress`);
    assert.ok(
      log.body.items.some((d) => d.host === 'redis.atelier.internal' && d.reason === 'INTERNAL_SERVICE'),
      'the CONNECT is recorded',
    );
    assert.ok(
      log.body.items.some((d) => d.host === 'nothing.atelier.internal' && d.reason === 'INTERNAL_UNKNOWN'),
      'the refusal is recorded',
    );
  });

  it('a live request starts one more, reachable at once by name, with its variables in new execs', async () => {
    const r = await server.cli([
      'simulators',
      'request',
      ws,
      'postgres',
      '--name',
      'orders',
      '--option',
      'database=orders_test',
      '-o',
      'json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(r.stdout) as Sim;
    assert.equal(s.status, 'Running');
    assert.deepEqual(s.endpoint, { host: 'orders.atelier.internal', port: 5432 });
    const q = await server.exec(ws, [
      'sh',
      '-c',
      'psql "$ORDERS_DATABASE_URL" -Atc "select current_database()" && getent hosts orders.atelier.internal',
    ]);
    assert.equal(q.exitCode, 0, q.stderr);
    assert.match(q.stdout, /^orders_test\n127\.0\.100\.\d+\s+orders\.atelier\.internal/);
    // The first postgres keeps the plain names.
    const plain = await server.exec(ws, ['sh', '-c', 'echo "$DATABASE_URL"']);
    assert.match(plain.stdout, /@postgres\.atelier\.internal:5432\/testdb/);
  });

  it('`request … --version 9` asks the server for PostgreSQL 9 (it is no `atelier --version`)', async () => {
    const r = await server.cli(['simulators', 'request', ws, 'postgres', '--name', 'old', '--version', '9']);
    assert.equal(r.code, 1, r.stdout);
    assert.doesNotMatch(r.stdout, /^\d+\.\d+\.\d+\n$/);
    assert.match(r.stderr, /PostgreSQL 9 is not installed/);
    assert.ok(!(await list()).some((s) => s.name === 'old'));
  });

  it('`--option superuser=true` is read as the catalog says: a boolean, a superuser inside', async () => {
    const bad = await server.cli(['simulators', 'request', ws, 'postgres', '--name', 'admin', '--option', 'superuser=yes']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--option superuser=yes: superuser of a postgres simulator is true or false, e\.g\. --option superuser=true/);
    assert.ok(!(await list()).some((s) => s.name === 'admin'));

    const r = await server.cli(['simulators', 'request', ws, 'postgres', '--name', 'admin', '--option', 'superuser=true', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(r.stdout) as Sim;
    assert.equal(s.status, 'Running', s.statusReason ?? '');
    const q = await server.exec(ws, [
      'sh',
      '-c',
      'psql "$ADMIN_DATABASE_URL" -Atc "select rolsuper from pg_roles where rolname = current_user"',
    ]);
    assert.equal(q.exitCode, 0, q.stderr);
    assert.equal(q.stdout, 't\n');
  });

  it('bad requests are refused clearly and change nothing', async () => {
    const before = (await list()).map((s) => s.name);
    const unknown = await server.api<{ code: string; message: string }>('POST', `/v1/workshops/${ws}/simulators`, { type: 'mongodb' });
    assert.equal(unknown.status, 400);
    assert.match(unknown.body.message, /unknown simulator type "mongodb": this server runs postgres, redis/);
    const twice = await server.api<{ code: string }>('POST', `/v1/workshops/${ws}/simulators`, { type: 'redis' });
    assert.equal(twice.status, 409);
    const version = await server.api<{ message: string }>('POST', `/v1/workshops/${ws}/simulators`, {
      type: 'postgres',
      name: 'old',
      version: '9',
    });
    assert.ok(version.status >= 400 && version.status < 500, JSON.stringify(version.body));
    assert.match(version.body.message, /installed/);
    const env = await server.api('POST', `/v1/workshops/${ws}/simulators`, { type: 'redis', name: 'r2', env: { 'BAD NAME': 'x' } });
    assert.equal(env.status, 400);
    const label = await server.api('POST', `/v1/workshops/${ws}/simulators`, { type: 'redis', name: 'Not_A_Label' });
    assert.equal(label.status, 400);
    assert.deepEqual(
      (await list()).map((s) => s.name),
      before,
    );
    // At create time, before anything is made: unknown type, a name twice, more than 8.
    const repo = makeRepo();
    for (const [simulators, message] of [
      [[{ type: 'mongodb' }], /unknown simulator type "mongodb"/],
      [[{ type: 'redis' }, { name: 'redis' }], /two simulators are named redis/],
      [Array.from({ length: 9 }, (_, i) => ({ type: 'redis', name: `r${i}` })), /at most 8 simulators \(this would make 9\)/],
    ] as const) {
      const r = await server.api<{ message: string }>('POST', '/v1/workshops', { repo, simulators });
      assert.equal(r.status, 400);
      assert.match(r.body.message, message);
    }
    const all = await server.api<{ items: unknown[] }>('GET', '/v1/workshops');
    assert.equal(all.body.items.length, 1);
  });

  it('reset returns a simulator to its initial state; logs show its own output', async () => {
    await server.exec(ws, ['redis-cli', '-h', 'redis.atelier.internal', 'SET', 'gone', '1']);
    const r = await server.cli(['simulators', 'reset', ws, 'redis']);
    assert.equal(r.code, 0, r.stderr);
    const get = await server.exec(ws, ['redis-cli', '-h', 'redis.atelier.internal', 'EXISTS', 'gone']);
    assert.equal(get.stdout.trim(), '0');
    await server.exec(ws, ['sh', '-c', 'psql "$DATABASE_URL" -c "create table t(x int)"']);
    assert.equal((await server.cli(['simulators', 'reset', ws, 'postgres'])).code, 0);
    const t = await server.exec(ws, ['sh', '-c', 'psql "$DATABASE_URL" -Atc "select count(*) from pg_tables where tablename = \'t\'"']);
    assert.equal(t.stdout.trim(), '0', t.stderr);
    const logs = await server.cli(['simulators', 'logs', ws, 'postgres']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.match(logs.stdout, /database system is ready to accept connections/);
    const missing = await server.cli(['simulators', 'logs', ws, 'nope']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no simulator named "nope"/);
  });

  it('a simulator whose process dies is restarted by the server, and its status says so', async () => {
    // Its data is in the workshop's own directory (what the workshop's disk quota covers).
    const dir = join(server.dataDir, 'workshops', ws, 'simulators');
    const [pid] = simulatorPids(join(dir, 'redis'), 'redis-server');
    assert.ok(pid, 'the redis simulator process is found');
    process.kill(pid, 'SIGKILL');
    let s: Sim | undefined;
    for (let i = 0; i < 100; i++) {
      s = (await list()).find((x) => x.name === 'redis');
      if (s?.restarts === 1 && s.status === 'Running') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(s?.restarts, 1, JSON.stringify(s));
    assert.match(s!.statusReason ?? '', /restarted by the server/);
    const ping = await server.exec(ws, ['redis-cli', '-h', 'redis.atelier.internal', 'PING']);
    assert.equal(ping.stdout.trim(), 'PONG');
  });

  it('simulators run in cgroups of their own under the workshop, frozen and thawed with it', async () => {
    const [pid] = simulatorPids(join(server.dataDir, 'workshops', ws, 'simulators', 'redis'), 'redis-server');
    assert.ok(pid, 'the redis simulator process is found');
    const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.split(':')[1] === 'freezer');
    assert.ok(line?.endsWith(`/${ws}/sim-redis`), `freezer cgroup: ${line}`);
    const state = join('/sys/fs/cgroup/freezer', line!.split(':')[2]!, 'freezer.state');
    assert.equal((await server.api('POST', `/v1/workshops/${ws}/stop`)).status, 200);
    assert.equal(readFileSync(state, 'utf8').trim(), 'FROZEN');
    assert.equal((await server.api('POST', `/v1/workshops/${ws}/resume`)).status, 200);
    assert.equal(readFileSync(state, 'utf8').trim(), 'THAWED');
    const ping = await server.exec(ws, ['redis-cli', '-h', 'redis.atelier.internal', 'PING']);
    assert.equal(ping.stdout.trim(), 'PONG');
  });

  it('stop ends one until a reset: its processes gone, its name and variables out of the workshop, the watchdog leaves it', async () => {
    const made = await server.cli(['simulators', 'request', ws, 'redis', '--name', 'parked']);
    assert.equal(made.code, 0, made.stderr);
    const dir = join(server.dataDir, 'workshops', ws, 'simulators', 'parked');
    assert.ok(simulatorPids(dir, 'redis-server').length > 0, 'the parked redis runs');
    const stopped = await server.cli(['simulators', 'stop', ws, 'parked', '-o', 'json']);
    assert.equal(stopped.code, 0, stopped.stderr);
    assert.equal((JSON.parse(stopped.stdout) as Sim).status, 'Stopped');
    assert.deepEqual(simulatorPids(dir), [], 'a stopped simulator keeps no process');
    const inside = await server.exec(ws, [
      'sh',
      '-c',
      'echo "${PARKED_REDIS_URL:-unset}"; redis-cli -h parked.atelier.internal PING 2>&1; true',
    ]);
    assert.equal(inside.stdout.split('\n')[0], 'unset');
    assert.doesNotMatch(inside.stdout, /PONG/);
    // Longer than two rounds of the watchdog (every 2 s), which restarts a Running one whose process ended.
    await new Promise((r) => setTimeout(r, 5000));
    const parked = (await list()).find((x) => x.name === 'parked')!;
    assert.equal(parked.status, 'Stopped', JSON.stringify(parked));
    assert.match(parked.statusReason ?? '', /^stopped by \S+ at .*simulators reset/);
    assert.deepEqual(parked.env, {});
    assert.equal(parked.restarts, 0);
    assert.deepEqual(simulatorPids(dir), []);
    // Stopping it again changes nothing; a reset starts it, reachable by name again.
    assert.equal((await server.cli(['simulators', 'stop', ws, 'parked'])).code, 0);
    assert.equal((await server.cli(['simulators', 'reset', ws, 'parked'])).code, 0);
    const back = await server.exec(ws, ['sh', '-c', 'redis-cli -u "$PARKED_REDIS_URL" PING']);
    assert.equal(back.stdout.trim(), 'PONG', back.stderr);
    // Stopped for the restart below, which must leave it so.
    assert.equal((await server.cli(['simulators', 'stop', ws, 'parked'])).code, 0);
  });

  it('simulators and their names survive a server restart', async () => {
    await server.stop();
    await server.boot();
    const parked = (await list()).find((x) => x.name === 'parked')!;
    assert.equal(parked.status, 'Stopped', 'a stopped simulator stays stopped across a server restart');
    assert.deepEqual(simulatorPids(join(server.dataDir, 'workshops', ws, 'simulators', 'parked')), []);
    const ping = await server.exec(ws, ['redis-cli', '-h', 'redis.atelier.internal', 'PING']);
    assert.equal(ping.stdout.trim(), 'PONG', ping.stderr);
    const pg = await server.exec(ws, ['sh', '-c', 'psql "$ORDERS_DATABASE_URL" -Atc "select 1"']);
    assert.equal(pg.stdout.trim(), '1', pg.stderr);
  });

  it('a burst of 5 live postgres requests all answer, each reachable from inside at its own name', async () => {
    // A workshop of its own (a workshop runs at most 8 simulators). The five requests arrive at
    // once; they drain the spare copies, and those that find none wait for the refill's copies.
    const c = await server.cli(['workshops', 'create', '--repo', makeRepo(), '--name', 'burst', '-o', 'json']);
    assert.equal(c.code, 0, c.stderr);
    const id = (JSON.parse(c.stdout) as { id: string }).id;
    try {
      const names = ['b1', 'b2', 'b3', 'b4', 'b5'];
      const answers = await Promise.all(
        names.map((name) =>
          server.api<Sim>('POST', `/v1/workshops/${id}/simulators`, { type: 'postgres', name, options: { database: `db_${name}` } }),
        ),
      );
      for (const a of answers) {
        assert.equal(a.status, 201, JSON.stringify(a.body));
        assert.equal(a.body.status, 'Running', a.body.statusReason ?? '');
      }
      const q = await server.exec(id, [
        'sh',
        '-c',
        names.map((n) => `psql "$${n.toUpperCase()}_DATABASE_URL" -Atc "select current_database()"`).join(' && '),
      ]);
      assert.equal(q.exitCode, 0, q.stderr);
      assert.deepEqual(
        q.stdout.trim().split('\n'),
        names.map((n) => `db_${n}`),
      );
    } finally {
      await server.api('DELETE', `/v1/workshops/${id}`);
    }
  });

  it('delete removes every simulator process and file', async () => {
    const dir = join(server.dataDir, 'workshops', ws, 'simulators');
    assert.ok(existsSync(dir), `${dir} exists`);
    // Every process of every simulator: the servers and the workers they forked (in their sandboxes).
    const pids = simulatorPids(dir);
    assert.ok(pids.length >= 3, `simulator processes: ${pids}`);
    const r = await server.api('DELETE', `/v1/workshops/${ws}`);
    assert.equal(r.status, 200);
    assert.equal(existsSync(dir), false);
    for (const pid of pids) assert.equal(alive(pid), false, `pid ${pid} still alive`);
    assert.equal(existsSync(join(server.dataDir, 'workshops', ws)), false);
    assert.deepEqual(
      readdirSync(join(server.dataDir, 'simulators')).filter((e) => e !== 'cache'),
      [],
    );
  });
});
