/**
 * 5. CLI start: wall time of `bin/atelier --version` and `bin/atelier workshops list` (against
 * the benchmark's server, through ATELIER_URL and ATELIER_TOKEN), beside `node -e 0`, all
 * spawned from this process and waited for to exit.
 */
import { ATELIER_BIN, goalLine, heading, ratioLine, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

const RUNS = 20;
const WARMUP = 2;
const GOAL_VERSION_MS = 100;

async function timeCommand(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const r = await timedSpawn(cmd, args, { env });
    if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`);
    if (i >= WARMUP) out.push(r.ms);
  }
  return out;
}

export async function cliStart(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`5. CLI start (${RUNS} runs each; goal --version p50 < ${GOAL_VERSION_MS} ms)`);
  const env = server.cliEnv();
  // One workshop, so that `list` prints a row rather than an empty table.
  const ws = await server.createWorkshop();
  try {
    const node = summarize(await timeCommand('node', ['-e', '0'], env));
    const version = summarize(await timeCommand(ATELIER_BIN, ['--version'], env));
    const list = summarize(await timeCommand(ATELIER_BIN, ['workshops', 'list'], env));
    statLine('node', '`node -e 0`', node, ['p50', 'p95']);
    statLine('atelier', '`bin/atelier --version`', version, ['p50', 'p95']);
    statLine('atelier', '`bin/atelier workshops list` (1 workshop)', list, ['p50', 'p95']);
    ratioLine('--version / node -e 0 (p50)', version.p50, node.p50);
    ratioLine('workshops list / node -e 0 (p50)', list.p50, node.p50);
    goalLine(`--version p50 < ${GOAL_VERSION_MS} ms`, version.p50, GOAL_VERSION_MS);
    return { node, version, list };
  } finally {
    await server.deleteWorkshop(ws.id);
  }
}
