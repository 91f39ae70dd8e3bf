/**
 * 3. Resume → first exec completed: suspend a workshop (POST …/stop, cgroup freezer), then time
 * POST …/resume followed by POST …/exec `true`. No peer runs in this benchmark (DESIGN.md names
 * none); the published anchor there is E2B's resume, about 1 s, not measured here.
 */
import { goalLine, heading, line, statLine, summarize, type BenchServer } from './lib.js';

const ROUNDS = 20;
const WARMUP = 3;
const GOAL_P50_MS = 50;

export async function resumeExec(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`3. resume -> first exec completed (${ROUNDS} rounds; goal p50 < ${GOAL_P50_MS} ms)`);
  const ws = await server.createWorkshop();
  try {
    const total: number[] = [];
    const resumeOnly: number[] = [];
    const stopOnly: number[] = [];
    for (let i = 0; i < WARMUP + ROUNDS; i++) {
      const s0 = performance.now();
      const stopped = await server.request<{ status: string }>('POST', `/v1/workshops/${ws.id}/stop`);
      const s1 = performance.now();
      if (stopped.status !== 'Suspended') throw new Error(`stop answered status ${stopped.status}`);
      const t0 = performance.now();
      const resumed = await server.request<{ status: string }>('POST', `/v1/workshops/${ws.id}/resume`);
      const t1 = performance.now();
      if (resumed.status !== 'Running') throw new Error(`resume answered status ${resumed.status}`);
      await server.exec(ws.id, ['true']);
      const t2 = performance.now();
      if (i < WARMUP) continue;
      stopOnly.push(s1 - s0);
      total.push(t2 - t0);
      resumeOnly.push(t1 - t0);
    }
    const s = summarize(total);
    statLine('atelier', 'POST …/resume + POST …/exec `true`', s, ['p50', 'p95']);
    statLine('', '  of which POST …/resume', summarize(resumeOnly), ['p50', 'p95']);
    statLine('(info)', 'POST …/stop (freeze), not counted above', summarize(stopOnly), ['p50', 'p95']);
    line('peer     none measured in this run (DESIGN.md: published anchor E2B resume ~1 s)');
    goalLine(`resume -> first exec p50 < ${GOAL_P50_MS} ms`, s.p50, GOAL_P50_MS);
    return { atelier: s, resumeOnly: summarize(resumeOnly), stop: summarize(stopOnly) };
  } finally {
    await server.deleteWorkshop(ws.id);
  }
}
