/**
 * 2. Exec round trip: POST /v1/workshops/:id/exec `true` on a running workshop, sequentially,
 * beside a bare `bwrap … true` spawned from this process. Two reference lines split Atelier's
 * time: an authenticated GET of the same workshop (HTTP + token check + one query, no process),
 * and `true` spawned directly (no sandbox: the floor of a Node child process).
 */
import { goalLine, heading, line, ratioLine, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';
import { bwrapAvailable, runBareBwrap } from './peers.js';

const RUNS = 200;
const WARMUP = 20;
const GOAL_P50_MS = 15;

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
  } finally {
    await server.deleteWorkshop(ws.id);
  }
  return result;
}
