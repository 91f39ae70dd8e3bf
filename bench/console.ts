/**
 * Console: wall time of one read-only command through the Console (`POST /api/workspace/console`
 * with `projects list`: check against ALLOWED, spawn of our CLI with the caller's token, which
 * calls the server back) beside its peer, the same `bin/atelier projects list` spawned directly.
 */
import { alternate, ATELIER_BIN, heading, ratioLine, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

const RUNS = 15;
const WARMUP = 2;

export async function consoleBench(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`Console: one read-only command (${RUNS} runs each)`);
  const env = server.cliEnv();
  const [direct, viaConsole] = await alternate(
    RUNS,
    WARMUP,
    async () => {
      const r = await timedSpawn(ATELIER_BIN, ['projects', 'list'], { env });
      if (r.code !== 0) throw new Error(`atelier projects list exited ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`);
      return r.ms;
    },
    async () => {
      const res = await fetch(`${server.url}/api/workspace/console`, {
        method: 'POST',
        headers: { authorization: `Bearer ${server.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ argv: ['projects', 'list'] }),
      });
      const body = (await res.json()) as { exitCode?: number; stderr?: string };
      if (res.status !== 200 || body.exitCode !== 0) throw new Error(`console: ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
    },
  );
  const d = summarize(direct);
  const c = summarize(viaConsole);
  statLine('atelier', '`bin/atelier projects list` spawned directly', d, ['p50', 'p95']);
  statLine('atelier', 'POST /api/workspace/console {argv: [projects, list]}', c, ['p50', 'p95']);
  ratioLine('console / direct (p50)', c.p50, d.p50);
  return { direct: d, console: c };
}
