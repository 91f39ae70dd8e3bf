/**
 * Workshop create with simulators → all ready: POST /v1/workshops with postgres + redis +
 * localstack (S3 only), then one exec inside that queries each by name (`psql … select 1`,
 * `redis-cli PING`, an S3 ListBuckets with curl), end to end. Beside it, in the same run: the same create
 * without simulators (what the simulators add), and the peer a user would otherwise script by
 * hand: `initdb` + start + first query of a PostgreSQL and a `redis-server` start + PING, from
 * scratch on this host (what Testcontainers-style set-ups pay, minus the container runtime).
 */
import { chmodSync, closeSync, constants, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { postgresFromScratch } from './simulators.js';
import { goalLine, heading, line, ratioLine, sleep, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

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
  const a = summarize(withSims);
  const b = summarize(bare);
  const c = summarize(scratch);
  statLine('atelier', `create with ${types.join(' + ')} + first query of each`, a, ['p50', 'p95']);
  statLine('atelier', 'create without simulators (same repo, same run)', b, ['p50', 'p95']);
  statLine('peer', 'from scratch: initdb + start + query, redis-server + PING', c, ['p50', 'p95']);
  ratioLine('simulators add (p50)', a.p50 - b.p50, c.p50);
  return {
    types,
    withSimulators: a,
    withoutSimulators: b,
    fromScratch: c,
  };
}

/** Writes `text` to the FIFO `path` once a reader has it open (retries while none has: ENXIO). */
async function writeFifo(path: string, text: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let fd: number;
    try {
      fd = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENXIO' && code !== 'ENOENT') || Date.now() > deadline) throw err;
      await sleep(1);
      continue;
    }
    try {
      writeSync(fd, text);
    } finally {
      closeSync(fd);
    }
    return;
  }
}

/**
 * A live request in a running workshop (an agent's `request_simulator`): postgres through
 * `POST /v1/workshops/:id/simulators`, up to the first query from inside the workshop. Beside
 * it, in the same run, the peer: `initdb` + start + first query from scratch on this host.
 */
export async function liveSimulator(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`live postgres request in a running workshop -> first query from inside (${LIVE_ROUNDS} rounds; goal p50 < 250 ms)`);
  // A live request in a running workshop (what an agent's request_simulator does), then the
  // first query from inside, two ways:
  // - "agent": a shell already running in the workshop (as an agent's is) gets the connection
  //   URL from the API's answer and runs psql; the time is the moment psql answered, read from
  //   the workshop's clock (the same kernel clock as the host's). The shell waits for the URL on
  //   a FIFO (blocked, like an agent waiting for an HTTP answer): a polling loop would spawn a
  //   process every millisecond in the workshop, beside the start it measures.
  // - "exec": the same psql through a new `POST /exec` (adds the exec's own spawn and HTTP).
  const live: number[] = [];
  const api: number[] = [];
  let first = Number.NaN;
  const liveExec: number[] = [];
  const scratch: number[] = [];
  const liveIds: string[] = [];
  const now = (): number => performance.timeOrigin + performance.now();
  const runAs = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;
  const scratchBase = join(server.scratch.dir, 'live-scratch');
  mkdirSync(scratchBase, { recursive: true });
  chmodSync(scratchBase, 0o711);
  try {
    const ws = await server.createWorkshop({ memory: '1g' });
    liveIds.push(ws.id);
    const dir = join(server.dataDir, 'workshops', ws.id, 'workspace', '.bench-live');
    const rounds = LIVE_ROUNDS + 1;
    const d = '/workspace/.bench-live';
    const agent =
      `mkdir -p ${d} && mkfifo ${d}/go && i=1 && while [ $i -le ${rounds} ]; do ` +
      `read url < ${d}/go; ` +
      `psql "$url" -Atc "select 1" >/dev/null 2>${d}/err-$i; ` +
      `date +%s%N > ${d}/t-$i.tmp && mv ${d}/t-$i.tmp ${d}/t-$i; i=$((i+1)); done`;
    const execView = await server.request<{ id: string }>('POST', `/v1/workshops/${ws.id}/execs`, { command: ['sh', '-c', agent] });
    for (let k = 0; !existsSync(join(dir, 'go')); k++) {
      if (k > 5000) throw new Error('the in-workshop client did not start');
      await sleep(2);
    }
    for (let i = 1; i <= rounds; i++) {
      const t0 = now();
      const view = await server.request<{ env: Record<string, string> }>('POST', `/v1/workshops/${ws.id}/simulators`, {
        type: 'postgres',
        name: `p${i}`,
      });
      const tApi = now();
      await writeFifo(join(dir, 'go'), `${view.env.DATABASE_URL!}\n`);
      const done = join(dir, `t-${i}`);
      for (let k = 0; !existsSync(done); k++) {
        if (k > 15_000) throw new Error(`live postgres p${i}: no answer from the in-workshop client`);
        await sleep(1);
      }
      const err = readFileSync(join(dir, `err-${i}`), 'utf8').trim();
      if (err) throw new Error(`live postgres p${i} not reachable: ${err}`);
      const t1 = Number(BigInt(readFileSync(done, 'utf8').trim()) / 1000n) / 1000;
      if (i > 1) {
        live.push(t1 - t0);
        api.push(tApi - t0);
      } else first = t1 - t0;
      // The peer, between two rounds so that a busy moment on the machine hits both.
      scratch.push(await postgresFromScratch(join(scratchBase, `r${i}`), runAs));
    }
    await server.request('GET', `/v1/execs/${execView.id}?wait=30`);
    // A workshop runs at most 8 simulators: the exec rounds get a workshop of their own.
    const ws2 = await server.createWorkshop({ memory: '1g' });
    liveIds.push(ws2.id);
    for (let i = 1; i <= rounds; i++) {
      const t0 = performance.now();
      await server.request('POST', `/v1/workshops/${ws2.id}/simulators`, { type: 'postgres', name: `p${i}` });
      const r = await server.exec(ws2.id, ['sh', '-c', `psql "$P${i}_DATABASE_URL" -Atc "select 1"`]);
      if (r.exitCode !== 0) throw new Error(`live postgres p${i} not reachable: ${r.stderr}`);
      if (i > 1) liveExec.push(performance.now() - t0);
    }
  } finally {
    await server.deleteMany(liveIds).catch((err: Error) => line(`delete failed: ${err.message}`));
    rmSync(scratchBase, { recursive: true, force: true });
  }
  statLine('atelier', 'live request (API) -> first query by a client in the workshop', summarize(live), ['p50', 'p95']);
  statLine('atelier', '  of which: the API answered (201, reachable)', summarize(api), ['p50', 'p95']);
  line(`  (round 1, not counted: the first request after the server's start, its spare copies still being made: ${first.toFixed(0)} ms)`);
  statLine('atelier', 'live request (API) -> the same query through a new exec', summarize(liveExec), ['p50', 'p95']);
  statLine('peer', 'initdb + postgres start -> first SELECT 1, from scratch (same run)', summarize(scratch), ['p50', 'p95']);
  ratioLine('live request / from scratch (p50)', summarize(live).p50, summarize(scratch).p50);
  goalLine('live request -> first query, p50 < 250 ms', summarize(live).p50, 250);
  goalLine('live request -> first query, p50 < 1/4 of from scratch', summarize(live).p50, summarize(scratch).p50 / 4);
  // Where the server's time went (its own log): the simulator's processes up to their first
  // answer, then publishing them (listeners, names, environment).
  const started = server.logRecords('simulators started').filter((r) => r.live === true);
  const split = (key: string, of: (r: Record<string, unknown>) => unknown = (r) => r[key]) =>
    summarize(started.map(of).filter((v): v is number => typeof v === 'number'));
  const beforeMs = split('beforeMs');
  const startMs = split('startMs');
  const publishMs = split('publishMs');
  const phaseNames = ['prepareMs', 'socketDirMs', 'spawnMs', 'readyMs', 'initialiseMs', 'recordMs'];
  const phases = Object.fromEntries(
    phaseNames.map((p) => [p, split(p, (r) => Object.values((r.phases ?? {}) as Record<string, Record<string, number>>)[0]?.[p])]),
  );
  if (started.length > 0) {
    line(
      `server side (p50 of ${started.length}): before the start ${beforeMs.p50.toFixed(0)} ms, processes up to first answer ${startMs.p50.toFixed(0)} ms, publishing ${publishMs.p50.toFixed(0)} ms`,
    );
    line(
      `  the start, phase by phase (p50): ${phaseNames
        .filter((p) => phases[p]!.n > 0)
        .map((p) => `${p.replace(/Ms$/, '')} ${phases[p]!.p50.toFixed(0)}`)
        .join(', ')} ms`,
    );
  }
  return {
    liveRequest: summarize(live),
    apiAnswer: summarize(api),
    firstRoundMs: first,
    liveRequestExec: summarize(liveExec),
    fromScratch: summarize(scratch),
    serverBeforeMs: beforeMs,
    serverStartMs: startMs,
    serverPublishMs: publishMs,
    serverPhases: phases,
  };
}
