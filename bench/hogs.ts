/**
 * 12. The server's answer time while one workshop hogs the host (issue 18, "one workshop cannot
 * starve the server"): GET /v1/workshops/:id and an exec `true` in another workshop (B) with a
 * fork bomb (held by its pids limit), a CPU hog on every core and a memory hog (held by its
 * memory limit, started again each time the OOM killer takes it) in workshop A, beside the same
 * at rest (A frozen); medians and the ratio to rest. The load is measured with the
 * workshops' cpu.shares as the server set them (ATELIER_WORKSHOPS_CPU_SHARES) and at 256, 512
 * and the kernel's default 1024, so that the choice is measured in the same run; all alternate
 * in quarters.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { heading, line, ratioLine, sleep, statLine, summarize, type BenchServer, type Summary } from './lib.js';

const RUNS = 80;
const WARMUP = 10;
/** How long the load may take to reach A's pids limit before the benchmark gives up (a hang guard). */
const LOAD_DEADLINE_MS = 120_000;

const HOGS = [
  "(while :; do perl -e 'my @a; while (1) { push @a, q(x) x (1 << 20) }'; done) </dev/null >/dev/null 2>&1 &",
  'for i in $(seq 1 $(nproc)); do (while :; do :; done) </dev/null >/dev/null 2>&1 & done',
  "sleep 3; perl -e 'while (1) { fork }' </dev/null >/dev/null 2>&1 &",
].join('\n');

interface Samples {
  get: number[];
  exec: number[];
}

/** `n` GETs of B and `n` execs of `true` in B, interleaved, after `WARMUP` of each. */
async function measure(server: BenchServer, b: string, n: number): Promise<Samples> {
  const out: Samples = { get: [], exec: [] };
  for (let i = 0; i < WARMUP + n; i++) {
    const t0 = performance.now();
    await server.request('GET', `/v1/workshops/${b}`);
    const t1 = performance.now();
    await server.exec(b, ['true']);
    const t2 = performance.now();
    if (i >= WARMUP) {
      out.get.push(t1 - t0);
      out.exec.push(t2 - t1);
    }
  }
  return out;
}

function show(label: string, s: { get: Summary; exec: Summary }): void {
  statLine(label, 'GET /v1/workshops/:id (B)', s.get, ['p50', 'p95']);
  statLine(label, 'POST …/exec `true` in B', s.exec, ['p50', 'p95']);
}

export async function hogs(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`12. the server's answers while workshop A runs a fork bomb, a CPU hog per core and a memory hog (${RUNS} runs each)`);
  const sharesFiles = [join(dirname(server.nodeCgroupDir('cpu')), 'cpu.shares'), join(server.nodeCgroupDir('cpu'), 'cpu.shares')];
  const configured = readFileSync(sharesFiles[1]!, 'utf8').trim();
  const setShares = (v: string): void => {
    for (const f of sharesFiles) writeFileSync(f, v);
  };
  const b = (await server.createWorkshop()).id;
  const a = (await server.createWorkshop({ memory: '1g', cpus: cpus().length, pids: 256 })).id;
  const freezer = join(server.workshopCgroupDir('freezer', a), 'freezer.state');
  /** Rest is A frozen (its load stopped where it stands), load is A thawed: both within the same minutes. */
  const setFrozen = async (frozen: boolean): Promise<void> => {
    const want = frozen ? 'FROZEN' : 'THAWED';
    writeFileSync(freezer, want);
    const deadline = Date.now() + LOAD_DEADLINE_MS;
    while (readFileSync(freezer, 'utf8').trim() !== want) {
      if (Date.now() > deadline) throw new Error(`workshop A did not become ${want}`);
      await sleep(10);
    }
  };
  try {
    await server.exec(a, ['sh', '-c', HOGS]);
    const deadline = Date.now() + LOAD_DEADLINE_MS;
    const events = join(server.workshopCgroupDir('pids', a), 'pids.events');
    while (!/^max [1-9]/m.test(readFileSync(events, 'utf8'))) {
      if (Date.now() > deadline) throw new Error(`the fork bomb did not reach A's pids limit within ${LOAD_DEADLINE_MS / 1000} s`);
      await sleep(200);
    }
    line(
      `load in A: ${readFileSync(join(server.workshopCgroupDir('pids', a), 'pids.current'), 'utf8').trim()} processes (its pids limit), load average ${loadavg()
        .map((x) => x.toFixed(1))
        .join(' ')}`,
    );

    // Rest and the load at each cpu.shares alternate in quarters, so that all see the same machine
    // (other work on the host comes and goes).
    const settings = ['rest', ...new Set([configured, '256', '512', '1024'])];
    const samples: Record<string, Samples> = Object.fromEntries(settings.map((v) => [v, { get: [], exec: [] }]));
    for (let round = 0; round < 4; round++) {
      for (let k = 0; k < settings.length; k++) {
        const v = settings[(k + round) % settings.length]!;
        await setFrozen(v === 'rest');
        if (v !== 'rest') {
          setShares(v);
          await sleep(1000);
        }
        const s = await measure(server, b, RUNS / 4);
        samples[v]!.get.push(...s.get);
        samples[v]!.exec.push(...s.exec);
      }
    }
    setShares(configured);
    await setFrozen(false);
    const sum = (v: string): { get: Summary; exec: Summary } => ({ get: summarize(samples[v]!.get), exec: summarize(samples[v]!.exec) });
    const rest = sum('rest');
    show('rest', rest);
    const result: Record<string, unknown> = { rest, configuredShares: Number(configured) };
    for (const v of settings.slice(1)) {
      const s = sum(v);
      show(`load ${v}`, s);
      ratioLine(`GET under load (workshops at cpu.shares ${v}) / at rest (p50)`, s.get.p50, rest.get.p50);
      ratioLine(`exec in B under load (workshops at cpu.shares ${v}) / at rest (p50)`, s.exec.p50, rest.exec.p50);
      result[v === configured ? 'load' : `loadShares${v}`] = s;
    }
    line(
      `(rest: A frozen; load ${configured}: the workshops' cpu.shares as the server set them, ATELIER_WORKSHOPS_CPU_SHARES; 1024: the kernel's default)`,
    );
    return result;
  } finally {
    setShares(configured);
    await server.deleteWorkshop(a);
    await server.deleteWorkshop(b);
  }
}
