/**
 * 15. Nodes (docs/replicas.md): a second server joins the bench server's installation (its
 * embedded PostgreSQL, its master key) as node `bench-edge`; a workshop runs on the bench server.
 * Exec round trip of `true` through the non-owner node beside the owner, alternated run by run
 * (goal: at most +1 ms p50), with the CPU each server spends per exec on either path, and
 * port-forward throughput through each (goal: the non-owner's download and upload at least 0.8x
 * the owner's). With ATELIER_BENCH_CPU_PROF, both servers are profiled (`server/`, `edge/`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import {
  ATELIER_BIN,
  alternate,
  cpuProfileArgs,
  goalLine,
  heading,
  line,
  makeScratch,
  ms,
  ratioLine,
  sleep,
  statLine,
  summarize,
  type BenchServer,
} from './lib.js';
import { measure, SERVER_PY, watch, type PathResult } from './terminals.js';

const RUNS = 200;
const WARMUP = 20;
/** Execs per block of the CPU-time figures (one block through each path, after the timed runs). */
const CPU_RUNS = 200;
const GOAL_EXTRA_P50_MS = 1;
const GOAL_THROUGHPUT_OF_OWNER = 0.8;
const PORT_IN_WORKSHOP = 9100;

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

function post(url: string, token: string, path: string, body: unknown): Promise<void> {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}${path}`,
      {
        method: 'POST',
        agent,
        headers: {
          authorization: `Bearer ${token}`,
          accept: 'application/json',
          'content-type': 'application/json',
          'content-length': String(payload.length),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          res.statusCode === 200
            ? resolve()
            : reject(new Error(`${path}: ${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 300)}`)),
        );
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** A second server on the bench server's PostgreSQL and master key: a node of the same installation. */
async function startEdge(server: BenchServer, dir: string): Promise<{ url: string; child: ChildProcess }> {
  const dataDir = join(dir, 'data');
  mkdirSync(dataDir, { recursive: true });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ATELIER_CONFIG_DIR: join(dir, 'config'),
    ATELIER_MASTER_KEY_FILE: join(server.dataDir, 'master.key'),
    ATELIER_LOG_LEVEL: 'warn',
  };
  for (const k of ['ATELIER_URL', 'ATELIER_TOKEN', 'ATELIER_CONTEXT', 'ATELIER_DATA_DIR', 'ATELIER_LISTEN', 'ATELIER_DATABASE_URL'])
    delete env[k];
  const databaseUrl = `postgresql://atelier@/atelier?host=${encodeURIComponent(join(server.dataDir, 'pgsock'))}`;
  const child = spawn(
    process.execPath,
    [
      ...cpuProfileArgs('edge'),
      ATELIER_BIN,
      'server',
      'start',
      '--data-dir',
      dataDir,
      '--listen',
      '127.0.0.1:0',
      '--database-url',
      databaseUrl,
      '--node-name',
      'bench-edge',
    ],
    { env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  child.stdout!.on('data', (c: Buffer) => (log += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (log += c.toString()));
  const credentials = join(dataDir, 'credentials.txt');
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the second node exited (${child.exitCode}):\n${log.slice(-1500)}`);
    if (Date.now() > deadline) throw new Error(`the second node was not ready within 90 s:\n${log.slice(-1500)}`);
    if (existsSync(credentials)) {
      const url = /^url:\s*(http\S+)/m.exec(readFileSync(credentials, 'utf8'))?.[1];
      if (url) return { url, child };
    }
    await sleep(50);
  }
}

/**
 * CPU time a process used so far, in ms: the sum of its threads' time on a CPU (schedstat, in ns:
 * finer than /proc/PID/stat's clock ticks). The machine is shared: wall times move with everyone
 * else's load, a process's own CPU time much less.
 */
function cpuMs(pid: number): number {
  let ns = 0;
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return ns / 1e6;
}

/**
 * CPU ms per call of `f` used by each process of `pids` over `runs` calls in a row (with what each
 * does meanwhile on its own: heartbeats, timers, the clean-up of earlier execs; the same through
 * either path, so it cancels out of the relay's cost).
 */
async function cpuPerCall(runs: number, pids: number[], f: () => Promise<void>): Promise<number[]> {
  const before = pids.map(cpuMs);
  for (let i = 0; i < runs; i++) await f();
  return pids.map((p, i) => (cpuMs(p) - before[i]!) / runs);
}

export async function nodes(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `15. nodes: exec round trip (${RUNS} runs, alternated) and port-forward throughput through a non-owner node beside the owner (goals: +${GOAL_EXTRA_P50_MS} ms p50 at most, ${GOAL_THROUGHPUT_OF_OWNER}x at least)`,
  );
  // Made before the second node joins: it runs on the bench server.
  const ws = await server.createWorkshop({ memory: '512m' });
  const scratch = makeScratch();
  const children: ChildProcess[] = [];
  let edge: { url: string; child: ChildProcess } | undefined;
  const result: Record<string, unknown> = {};
  try {
    edge = await startEdge(server, join(scratch.dir, 'edge'));
    const edgeUrl = edge.url;
    const [owner, relayed] = await alternate(
      RUNS,
      WARMUP,
      () => post(server.url, server.token, `/v1/workshops/${ws.id}/exec`, { command: ['true'] }),
      () => post(edgeUrl, server.token, `/v1/workshops/${ws.id}/exec`, { command: ['true'] }),
    );
    const so = summarize(owner);
    const sr = summarize(relayed);
    statLine('owner', 'POST …/exec `true` on the node that runs it', so, ['p50', 'p99']);
    statLine('relayed', 'the same through the other node', sr, ['p50', 'p99']);
    line(`relay cost p50: ${ms(sr.p50 - so.p50)}`);
    goalLine(`non-owner exec p50 - owner p50 <= ${GOAL_EXTRA_P50_MS} ms`, sr.p50 - so.p50, GOAL_EXTRA_P50_MS + Number.EPSILON);
    // CPU per exec on each server, a block through each path: what the relay costs in CPU, and
    // where (the node that relays, the owner), whatever the machine's load.
    const pids = [server.pid, edge.child.pid!];
    const execVia = (url: string) => () => post(url, server.token, `/v1/workshops/${ws.id}/exec`, { command: ['true'] });
    // Two blocks through each path, alternated (the machine's load drifts).
    const blocks: number[][][] = [[], []];
    for (let i = 0; i < 2; i++)
      for (const [k, url] of [server.url, edgeUrl].entries()) blocks[k]!.push(await cpuPerCall(CPU_RUNS / 2, pids, execVia(url)));
    const meanOf = (b: number[][], i: number): number => b.reduce((n, x) => n + x[i]!, 0) / b.length;
    const direct = [meanOf(blocks[0]!, 0), meanOf(blocks[0]!, 1)];
    const via = [meanOf(blocks[1]!, 0), meanOf(blocks[1]!, 1)];
    line(
      `CPU per exec (${CPU_RUNS} each way): ` +
        `direct ${ms(direct[0]!)} on the owner (${ms(direct[1]!)} on the other node); ` +
        `relayed ${ms(via[1]!)} on the relaying node + ${ms(via[0]!)} on the owner`,
    );
    line(`relay cost in CPU per exec: ${ms(via[0]! + via[1]! - direct[0]! - direct[1]!)}`);
    result.exec = {
      owner: so,
      relayed: sr,
      cpuMs: { direct: { owner: direct[0], edge: direct[1] }, relayed: { owner: via[0], edge: via[1] } },
    };

    await server.request('POST', `/v1/workshops/${ws.id}/exec`, {
      command: ['sh', '-c', 'cat > tcp-bench.py'],
      stdin: Buffer.from(SERVER_PY).toString('base64'),
    });
    await server.exec(ws.id, ['sh', '-c', `nohup python3 tcp-bench.py ${PORT_IN_WORKSHOP} >/tmp/tcp-bench.log 2>&1 & sleep 0.5`]);
    const forward = async (url: string): Promise<number> => {
      const env: NodeJS.ProcessEnv = { ...server.cliEnv(), ATELIER_URL: url };
      const pf = spawn(process.execPath, [ATELIER_BIN, 'port-forward', ws.id, `0:${PORT_IN_WORKSHOP}`], {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(pf);
      return Number((await watch(pf, /Forwarding from 127\.0\.0\.1:(\d+)/, 'atelier port-forward'))[1]);
    };
    const ownerPort = await forward(server.url);
    const edgePort = await forward(edgeUrl);
    // Measured twice each, in both orders (the first transfers of a run warm the machine up).
    const path = (who: string, port: number): Promise<PathResult> =>
      measure(port).catch((err: Error) => {
        throw new Error(`port-forward through the ${who}: ${err.message}`);
      });
    const mo1 = await path('owner', ownerPort);
    const mr1 = await path('other node', edgePort);
    const mr2 = await path('other node', edgePort);
    const mo2 = await path('owner', ownerPort);
    const mean = (x: PathResult, y: PathResult): PathResult => ({ ...x, down: (x.down + y.down) / 2, up: (x.up + y.up) / 2 });
    const mo = mean(mo1, mo2);
    const mr = mean(mr1, mr2);
    for (const [who, what, r] of [
      ['owner', 'port-forward through the node that runs it', mo],
      ['relayed', 'port-forward through the other node', mr],
    ] as const) {
      line(`${who.padEnd(8)} ${what.padEnd(44)} down ${r.down.toFixed(1).padStart(7)} MiB/s  up ${r.up.toFixed(1).padStart(7)} MiB/s`);
      statLine(who, 'round trip of 1 byte', r.rtt, ['p50', 'p99']);
    }
    ratioLine('relayed / owner download', mr.down, mo.down);
    ratioLine('relayed / owner upload', mr.up, mo.up);
    // Each measure's own figures too: one path's transfers vary from one measure to the next.
    line(
      `each measure (MiB/s, in order): owner ${mo1.down.toFixed(0)}/${mo1.up.toFixed(0)}, other ${mr1.down.toFixed(0)}/${mr1.up.toFixed(0)}, ` +
        `other ${mr2.down.toFixed(0)}/${mr2.up.toFixed(0)}, owner ${mo2.down.toFixed(0)}/${mo2.up.toFixed(0)} (down/up)`,
    );
    for (const [way, share] of [
      ['download', mr.down / mo.down],
      ['upload', mr.up / mo.up],
    ] as const)
      line(
        `goal: port-forward ${way} through a non-owner >= ${GOAL_THROUGHPUT_OF_OWNER}x the owner's -> ${share >= GOAL_THROUGHPUT_OF_OWNER ? 'MET' : 'NOT MET'} (${share.toFixed(2)}x)`,
      );
    result.portForward = { owner: mo, relayed: mr };
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    await server.deleteWorkshop(ws.id, true);
    if (edge && edge.child.exitCode === null) {
      const exited = new Promise((r) => edge!.child.once('exit', r));
      edge.child.kill('SIGTERM');
      await exited;
    }
    rmSync(scratch.dir, { recursive: true, force: true });
  }
  return result;
}
