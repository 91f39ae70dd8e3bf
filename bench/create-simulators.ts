/**
 * Workshop create with simulators → all ready: POST /v1/workshops with postgres + redis +
 * localstack (S3 only), then one exec inside that queries each by name (`psql … select 1`,
 * `redis-cli PING`, an S3 ListBuckets with curl), end to end. Beside it, in the same run: the same create
 * without simulators (what the simulators add), and the peer a user would otherwise script by
 * hand: `initdb` + start + first query of a PostgreSQL and a `redis-server` start + PING, from
 * scratch on this host (what Testcontainers-style set-ups pay, minus the container runtime).
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { heading, line, ratioLine, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

const ROUNDS = 8;
/** A workshop runs at most 8 simulators: one cold request, then these. */
const LIVE_ROUNDS = 7;
const PG_BIN = '/usr/lib/postgresql/15/bin';

async function fromScratch(dir: string): Promise<number> {
  const t0 = performance.now();
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const asPostgres = (cmd: string) => timedSpawn('su', ['-s', '/bin/sh', 'postgres', '-c', cmd], {}, 60_000);
  await timedSpawn('chown', ['postgres', dir]);
  const init = await asPostgres(`${PG_BIN}/initdb -D ${dir}/pg --no-sync -A trust -U bench >/dev/null`);
  if (init.code !== 0) throw new Error(`initdb: ${init.stderr}`);
  const start = await asPostgres(`${PG_BIN}/pg_ctl -D ${dir}/pg -o "-k ${dir} -c listen_addresses='' -c fsync=off" -w -s start >/dev/null`);
  if (start.code !== 0) throw new Error(`pg_ctl start: ${start.stderr}`);
  const q = await asPostgres(`psql -h ${dir} -U bench -d postgres -Atc 'select 1'`);
  if (q.code !== 0) throw new Error(`psql: ${q.stderr}`);
  const redis = await timedSpawn('sh', [
    '-c',
    `redis-server --port 0 --unixsocket ${dir}/redis.sock --save '' --appendonly no --daemonize yes --pidfile ${dir}/redis.pid >/dev/null && ` +
      `for i in $(seq 200); do redis-cli -s ${dir}/redis.sock PING 2>/dev/null | grep -q PONG && exit 0; sleep 0.005; done; exit 1`,
  ]);
  if (redis.code !== 0) throw new Error(`redis: ${redis.stderr}`);
  const elapsed = performance.now() - t0;
  await asPostgres(`${PG_BIN}/pg_ctl -D ${dir}/pg -m immediate -s stop`);
  await timedSpawn('sh', ['-c', `kill $(cat ${dir}/redis.pid)`]);
  return elapsed;
}

export async function createSimulators(server: BenchServer): Promise<Record<string, unknown>> {
  const types = ['postgres', 'redis', 'localstack(s3)'];
  const sims: unknown[] = [{ type: 'postgres' }, { type: 'redis' }, { type: 'localstack', services: ['s3'] }];
  heading(`create with simulators (${types.join(' + ')}) -> all ready and queried (${ROUNDS} workshops)`);
  const ids: string[] = [];
  const withSims: number[] = [];
  const bare: number[] = [];
  const scratch: number[] = [];
  // One real round trip to each: a query, a PING, an S3 ListBuckets (unsigned requests are S3's).
  const check =
    'psql "$DATABASE_URL" -Atc "select 1" >/dev/null && redis-cli -h redis.atelier.internal PING >/dev/null && curl -sf "$AWS_ENDPOINT_URL/" >/dev/null';
  try {
    for (let i = 0; i <= ROUNDS; i++) {
      const t0 = performance.now();
      const ws = await server.createWorkshop({ simulators: sims, memory: '512m' });
      ids.push(ws.id);
      const r = await server.exec(ws.id, ['sh', '-c', check]);
      if (r.exitCode !== 0) throw new Error(`simulators not reachable in ${ws.id}: ${r.stderr}`);
      const t1 = performance.now();
      const b = await server.createWorkshop({ memory: '512m' });
      ids.push(b.id);
      const t2 = performance.now();
      const s = await fromScratch(join(server.scratch.dir, `scratch-${i}`));
      if (i === 0) continue; // cold round (first template copy, JIT): not counted
      withSims.push(t1 - t0);
      bare.push(t2 - t1);
      scratch.push(s);
    }
  } finally {
    await server.deleteMany(ids).catch((err: Error) => line(`delete failed: ${err.message}`));
  }
  // A live request in a running workshop (what an agent's request_simulator does), then the
  // first query from inside: the path end to end, HTTP and exec included.
  const live: number[] = [];
  const liveIds: string[] = [];
  try {
    const ws = await server.createWorkshop({ memory: '1g' });
    liveIds.push(ws.id);
    for (let i = 0; i <= LIVE_ROUNDS; i++) {
      const t0 = performance.now();
      await server.request('POST', `/v1/workshops/${ws.id}/simulators`, { type: 'postgres', name: `p${i}` });
      const r = await server.exec(ws.id, ['sh', '-c', `psql "$P${i}_DATABASE_URL" -Atc "select 1"`]);
      if (r.exitCode !== 0) throw new Error(`live postgres p${i} not reachable: ${r.stderr}`);
      if (i > 0) live.push(performance.now() - t0);
    }
  } finally {
    await server.deleteMany(liveIds).catch((err: Error) => line(`delete failed: ${err.message}`));
  }
  statLine('atelier', 'live request (API) -> first query from inside', summarize(live), ['p50', 'p95']);
  const a = summarize(withSims);
  const b = summarize(bare);
  const c = summarize(scratch);
  statLine('atelier', `create with ${types.join(' + ')} + first query of each`, a, ['p50', 'p95']);
  statLine('atelier', 'create without simulators (same repo, same run)', b, ['p50', 'p95']);
  statLine('peer', 'from scratch: initdb + start + query, redis-server + PING', c, ['p50', 'p95']);
  ratioLine('simulators add (p50)', a.p50 - b.p50, c.p50);
  return { types, withSimulators: a, withoutSimulators: b, fromScratch: c, liveRequest: summarize(live) };
}
