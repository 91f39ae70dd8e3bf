/**
 * 5. CLI start: wall time of `node -e 0`, `bin/atelier --version`, `bin/atelier workshops list`
 * and `bin/atelier exec ID -- true` (against the benchmark's server, through ATELIER_URL and
 * ATELIER_TOKEN; `workshops list` also as a user runs it, through the `local` context the server
 * wrote), all spawned from this process and waited for to exit. The four commands are
 * interleaved run by run (one of each, then the next round), so that whatever load the machine
 * has falls on all of them alike; the goals are differences of medians from the same run.
 * ATELIER_BENCH_CLI names another launcher to measure, such as an installed release's
 * (`ATELIER_BENCH_CLI=/usr/local/bin/atelier npm run bench -- cli`), as issue 20 measures it.
 */
import { readFileSync } from 'node:fs';
import { ATELIER_BIN, goalLine, heading, line, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

/** The CLI measured (the server is always this checkout's). */
const CLI = process.env.ATELIER_BENCH_CLI || ATELIER_BIN;
const RUNS = 60;
const WARMUP = 2;
const GOAL_VERSION_MS = 100;
/** `workshops list` within this of `node -e 0` (medians), and `exec ID -- true` within the next. */
const GOAL_LIST_OVER_NODE_MS = 30;
const GOAL_EXEC_OVER_NODE_MS = 40;

/**
 * CPU time (user + system) of this process's children that have been waited for, from
 * /proc/self/stat (cutime, cstime; in ticks of 1/100 s). The wall time is the goal's figure; the
 * CPU time beside it says what a command costs when other work shares the cores.
 */
function childCpuMs(): number {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ').at(-1)!.split(' ');
  // Fields 16 and 17 of proc(5), counted after the command name: indexes 13 and 14 here.
  return (Number(fields[13]) + Number(fields[14])) * 10;
}

export async function cliStart(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `5. CLI start (${RUNS} interleaved runs each; goals: list - node < ${GOAL_LIST_OVER_NODE_MS} ms, exec - node < ${GOAL_EXEC_OVER_NODE_MS} ms)`,
  );
  line(`CLI: ${CLI}`);
  const env = server.cliEnv();
  // One workshop, so that `list` prints a row rather than an empty table, and `exec` has a target.
  const ws = await server.createWorkshop();
  try {
    // As a user runs it: the server's `local` context (config.yaml and credentials.json), no ATELIER_URL.
    const contextEnv: NodeJS.ProcessEnv = { ...env };
    delete contextEnv.ATELIER_URL;
    delete contextEnv.ATELIER_TOKEN;
    const commands: { key: string; what: string; cmd: string; args: string[]; env?: NodeJS.ProcessEnv }[] = [
      { key: 'node', what: '`node -e 0`', cmd: process.execPath, args: ['-e', '0'] },
      { key: 'version', what: '`atelier --version`', cmd: CLI, args: ['--version'] },
      { key: 'list', what: '`atelier workshops list` (1 workshop)', cmd: CLI, args: ['workshops', 'list'] },
      { key: 'listContext', what: '`atelier workshops list` (its context)', cmd: CLI, args: ['workshops', 'list'], env: contextEnv },
      { key: 'exec', what: '`atelier exec ID -- true`', cmd: CLI, args: ['exec', ws.id, '--', 'true'] },
    ];
    const samples = new Map<string, number[]>(commands.map((c) => [c.key, []]));
    const cpu = new Map<string, number>(commands.map((c) => [c.key, 0]));
    for (let i = 0; i < WARMUP + RUNS; i++) {
      for (const c of commands) {
        const cpu0 = childCpuMs();
        const r = await timedSpawn(c.cmd, c.args, { env: c.env ?? env });
        if (r.code !== 0) throw new Error(`${c.cmd} ${c.args.join(' ')} exited ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`);
        if (i >= WARMUP) {
          samples.get(c.key)!.push(r.ms);
          cpu.set(c.key, cpu.get(c.key)! + childCpuMs() - cpu0);
        }
      }
    }
    const s = Object.fromEntries(commands.map((c) => [c.key, summarize(samples.get(c.key)!)]));
    for (const c of commands) statLine(c.key === 'node' ? 'node' : 'atelier', c.what, s[c.key]!, ['p50', 'p95']);
    const node = s.node!.p50;
    const over = (k: string): number => s[k]!.p50 - node;
    line(`--version - node -e 0 (p50): ${over('version').toFixed(1)} ms`);
    line(`workshops list - node -e 0 (p50): ${over('list').toFixed(1)} ms`);
    line(`workshops list (its context) - node -e 0 (p50): ${over('listContext').toFixed(1)} ms`);
    line(`exec -- true - node -e 0 (p50): ${over('exec').toFixed(1)} ms`);
    const cpuMean = (k: string): number => cpu.get(k)! / RUNS;
    line(
      `CPU time, mean per run: ${commands.map((c) => `${c.key} ${cpuMean(c.key).toFixed(1)} ms`).join(', ')}; ` +
        `list - node ${(cpuMean('list') - cpuMean('node')).toFixed(1)} ms, exec - node ${(cpuMean('exec') - cpuMean('node')).toFixed(1)} ms`,
    );
    goalLine(`--version p50 < ${GOAL_VERSION_MS} ms`, s.version!.p50, GOAL_VERSION_MS);
    goalLine(`workshops list - node -e 0 < ${GOAL_LIST_OVER_NODE_MS} ms`, over('list'), GOAL_LIST_OVER_NODE_MS);
    goalLine(`exec -- true - node -e 0 < ${GOAL_EXEC_OVER_NODE_MS} ms`, over('exec'), GOAL_EXEC_OVER_NODE_MS);
    return {
      ...s,
      listOverNode: over('list'),
      listContextOverNode: over('listContext'),
      execOverNode: over('exec'),
      versionOverNode: over('version'),
      cpuMeanMs: Object.fromEntries(commands.map((c) => [c.key, cpuMean(c.key)])),
    };
  } finally {
    await server.deleteWorkshop(ws.id);
  }
}
