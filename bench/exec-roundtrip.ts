/**
 * 2. Exec round trip: POST /v1/workshops/:id/exec `true` on a running workshop, sequentially,
 * beside a bare `bwrap … true` spawned from this process. Two reference lines split Atelier's
 * time: an authenticated GET of the same workshop (HTTP + token check + one query, no process),
 * and `true` spawned directly (no sandbox: the floor of a Node child process).
 *
 * The entry alone: the very command line an exec runs (sandboxArgv: sandbox-enter) into a real
 * workshop sandbox started by the launcher. The system-call filter's share: bare bwrap with and
 * without the filter's loader, alternated run by run (sandbox-enter installs the same filter
 * in-process, so it cannot be measured without it there).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as Sandbox from '../src/sandbox/index.js';
import { alternate, goalLine, heading, line, ms, ratioLine, REPO_ROOT, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';
import { bareBwrapArgs, bwrapAvailable, runBareBwrap } from './peers.js';

const RUNS = 200;
const WARMUP = 20;
const GOAL_P50_MS = 15;
/** issue 17: the filter may add at most 1 ms to the exec round trip (p50). */
const FILTER_GOAL_MS = 1;

export async function execRoundTrip(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`2. exec round trip of \`true\` through the API (${RUNS} runs; goal p50 < ${GOAL_P50_MS} ms)`);
  const ws = await server.createWorkshop();
  const result: Record<string, unknown> = {};
  try {
    for (let i = 0; i < WARMUP; i++) await server.exec(ws.id, ['true']);
    const t: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await server.exec(ws.id, ['true']);
      t.push(performance.now() - t0);
    }
    const s = summarize(t);
    statLine('atelier', 'POST …/exec `true` (Accept: application/json)', s, ['p50', 'p99']);
    result.atelier = s;

    const g: number[] = [];
    for (let i = 0; i < WARMUP; i++) await server.request('GET', `/v1/workshops/${ws.id}`);
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await server.request('GET', `/v1/workshops/${ws.id}`);
      g.push(performance.now() - t0);
    }
    const gs = summarize(g);
    statLine('(ref)', 'GET /v1/workshops/:id (API cost, no process)', gs, ['p50', 'p99']);
    result.getWorkshop = gs;

    const noBwrap = bwrapAvailable();
    if (noBwrap) {
      line(`bwrap    skipped: ${noBwrap}`);
    } else {
      for (let i = 0; i < WARMUP; i++) await runBareBwrap();
      const b: number[] = [];
      for (let i = 0; i < RUNS; i++) b.push(await runBareBwrap());
      const bs = summarize(b);
      statLine('bwrap', 'bare `bwrap … true` spawn', bs, ['p50', 'p99']);
      ratioLine('atelier / bare bwrap (p50)', s.p50, bs.p50);
      ratioLine('atelier / bare bwrap (p99)', s.p99, bs.p99);
      result.bwrap = bs;
    }

    const d: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const r = await timedSpawn('/usr/bin/true', []);
      if (i >= WARMUP) d.push(r.ms);
    }
    const ds = summarize(d);
    statLine('(ref)', '`true` spawned directly, no sandbox', ds, ['p50', 'p99']);
    result.direct = ds;
    goalLine(`exec round trip p50 < ${GOAL_P50_MS} ms`, s.p50, GOAL_P50_MS);
    if (!noBwrap && process.getuid?.() === 0) result.filter = await filterShare();
    else line('filter   skipped: needs root and bwrap (it starts a sandbox with the launcher)');
  } finally {
    await server.deleteWorkshop(ws.id);
  }
  return result;
}

async function filterShare(): Promise<Record<string, unknown>> {
  const sandbox = (await import(pathToFileURL(join(REPO_ROOT, 'dist', 'sandbox', 'index.js')).href)) as typeof Sandbox;
  const root = mkdtempSync('/tmp/atelier-bench-seccomp-');
  const spec = { root, hostname: 'bench-seccomp', uid: 64_999, rootless: false, cgroups: null };
  const layout = sandbox.prepareLayout(spec);
  mkdirSync(layout.workspace, { mode: 0o755 });
  const handle = await sandbox.startSandbox(spec);
  try {
    const exec = { command: ['true'], cwd: '/workspace', env: { PATH: '/usr/bin:/bin' } };
    // The entry an exec runs (sandboxArgv: sandbox-enter, which installs the filter itself,
    // between entering the namespaces and dropping privileges; it cannot run without it).
    const entry = sandbox.sandboxArgv(handle, exec);
    const env = sandbox.privilegedEnv(exec);
    // CPU time of the whole run (its waited-for processes add to ours): what it costs whatever
    // the machine's load, which inflates wall times on a busy machine.
    const cpu = new Map<string[], number>();
    const once = async (argv: string[]): Promise<number> => {
      const c0 = childCpuMs();
      const r = await timedSpawn(argv[0]!, argv.slice(1), { env });
      cpu.set(argv, (cpu.get(argv) ?? 0) + childCpuMs() - c0);
      if (r.code !== 0) throw new Error(`${argv.join(' ')} exited ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`);
      return r.ms;
    };
    const perRun = (argv: string[]): number => (cpu.get(argv) ?? 0) / (RUNS + WARMUP);
    const e: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const t = await once(entry);
      if (i >= WARMUP) e.push(t);
    }
    const se = summarize(e);
    statLine('atelier', 'sandbox-enter … true into a workshop sandbox (filter included)', se, ['p50', 'p99']);
    line(`CPU time per entry: ${ms(perRun(entry))}`);

    // The filter's share, from outside: bare bwrap running `true` through the filter's loader
    // (seccomp-exec: one exec more, then the same seccomp(2) call sandbox-enter makes in-process)
    // against bare bwrap running `true`. An upper bound of what the filter adds to an entry.
    const loader = sandbox.seccompLoaderPath();
    const bwrapWith = ['--ro-bind', loader, sandbox.SECCOMP_EXEC, ...bareBwrapArgs(sandbox.seccompWrap(['true']))];
    const [c, d] = await alternate(
      RUNS,
      WARMUP,
      () => once(['bwrap', ...bwrapWith]),
      () => runBareBwrap(),
    );
    const sc = summarize(c);
    const sd = summarize(d);
    statLine('bwrap', 'bare `bwrap … seccomp-exec true`', sc, ['p50', 'p99']);
    statLine('bwrap', 'bare `bwrap … true`', sd, ['p50', 'p99']);
    goalLine(
      `the filter adds at most ${FILTER_GOAL_MS} ms to an exec (p50, bare bwrap with its loader − without: an upper bound)`,
      sc.p50 - sd.p50,
      FILTER_GOAL_MS,
    );
    return { entry: se, cpuMsEntry: perRun(entry), bwrapWithFilter: sc, bwrapWithout: sd };
  } finally {
    await sandbox.killSandbox(handle);
    rmSync(root, { recursive: true, force: true });
  }
}

/** CPU time (user + system) of this process's waited-for children so far, from /proc/self/stat (in clock ticks of 10 ms). */
function childCpuMs(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // cutime and cstime: fields 16 and 17 of stat(5), 14th and 15th after the command name.
  return (Number(f[13]) + Number(f[14])) * 10;
}
