/**
 * 4. Host memory per idle running workshop, with 50 of them. Three views, from the most to the
 * least precise: the processes in each workshop's pids cgroup (RSS summed, and PSS, which splits
 * pages shared with other processes such as the bwrap and sleep binaries); the workshop's
 * memory cgroup; and the host's MemTotal - MemAvailable before and after (noisy: it sees
 * everything else the machine does meanwhile). The server's own growth is reported beside,
 * with its embedded PostgreSQL. No peer: DESIGN.md names none for memory.
 */
import { readFileSync } from 'node:fs';
import {
  descendants,
  goalLine,
  heading,
  hostUsedBytes,
  line,
  mb,
  processTable,
  pssBytes,
  rssBytes,
  sleep,
  summarize,
  type BenchServer,
} from './lib.js';

const WORKSHOPS = 50;
const GOAL_MB = 15;

function serverTree(server: BenchServer): { nodeRss: number; pgRss: number; pgPss: number; pgProcs: number } {
  // pg_ctl daemonises the embedded PostgreSQL: find its postmaster by its data directory.
  const table = processTable();
  const pg = new Set<number>();
  for (const p of table.values()) {
    if (p.comm !== 'postgres') continue;
    try {
      if (!readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').includes(server.dataDir)) continue;
    } catch {
      continue;
    }
    pg.add(p.pid);
    for (const d of descendants(p.pid, table)) pg.add(d.pid);
  }
  let pgRss = 0;
  let pgPss = 0;
  for (const pid of pg) {
    pgRss += rssBytes(pid);
    pgPss += pssBytes(pid);
  }
  return { nodeRss: rssBytes(server.pid), pgRss, pgPss, pgProcs: pg.size };
}

export async function memory(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`4. host memory per idle running workshop (${WORKSHOPS} workshops; goal < ${GOAL_MB} MiB each)`);
  const ids: string[] = [];
  try {
    await sleep(1000);
    const hostBefore = hostUsedBytes();
    const before = serverTree(server);
    for (let i = 0; i < WORKSHOPS; i++) ids.push((await server.createWorkshop()).id);
    // Let them settle to idle (the build's short-lived processes gone).
    await sleep(2000);
    const rss: number[] = [];
    const pss: number[] = [];
    const memcg: number[] = [];
    const procs: number[] = [];
    for (const id of ids) {
      const pids = server.workshopPids(id);
      procs.push(pids.length);
      rss.push(pids.reduce((a, p) => a + rssBytes(p), 0));
      pss.push(pids.reduce((a, p) => a + pssBytes(p), 0));
      memcg.push(server.memcgUsage(id));
    }
    const hostAfter = hostUsedBytes();
    const after = serverTree(server);
    const r = summarize(rss);
    const p = summarize(pss);
    const m = summarize(memcg);
    const pr = summarize(procs);
    const sumRss = rss.reduce((a, b) => a + b, 0);
    line(`atelier  processes per workshop (pids cgroup): ${pr.min === pr.max ? pr.min : `${pr.min}-${pr.max}`}`);
    line(`atelier  RSS summed over a workshop's processes: median ${mb(r.p50)}, max ${mb(r.max)}; all ${WORKSHOPS}: ${mb(sumRss)}`);
    line(`atelier  PSS summed over a workshop's processes: median ${mb(p.p50)}, max ${mb(p.max)}`);
    line(`atelier  memory cgroup usage_in_bytes:           median ${mb(m.p50)}, max ${mb(m.max)}`);
    line(
      `host     (MemTotal - MemAvailable) delta / ${WORKSHOPS}:   ${mb((hostAfter - hostBefore) / WORKSHOPS)} (noisy; includes the server's growth and all else on the machine)`,
    );
    line(
      `server   node RSS: ${mb(before.nodeRss)} -> ${mb(after.nodeRss)} (${mb((after.nodeRss - before.nodeRss) / WORKSHOPS)} per workshop)`,
    );
    line(
      `server   embedded PostgreSQL PSS: ${mb(before.pgPss)} (${before.pgProcs} processes) -> ${mb(after.pgPss)} (${after.pgProcs}); pool connections come and go, so this is not per workshop`,
    );
    line('peer     none measured in this run (DESIGN.md names none for memory)');
    goalLine(`RSS per idle workshop (median) < ${GOAL_MB} MiB`, r.p50, GOAL_MB * 2 ** 20, mb);
    const result: Record<string, unknown> = {
      workshops: WORKSHOPS,
      processesPerWorkshop: pr,
      rssPerWorkshop: r,
      pssPerWorkshop: p,
      memcgPerWorkshop: m,
      hostUsedDeltaPerWorkshop: (hostAfter - hostBefore) / WORKSHOPS,
      server: { before, after },
    };
    const t0 = performance.now();
    const deletes = await server.deleteMany(ids.splice(0));
    const wall = performance.now() - t0;
    await sleep(500);
    const afterDelete = serverTree(server);
    line(
      `(info)   deleting the ${WORKSHOPS} (10 in parallel) took ${(wall / 1000).toFixed(2)} s; server node RSS after: ${mb(afterDelete.nodeRss)}`,
    );
    result.deleteWallMs = wall;
    result.deletes = summarize(deletes);
    result.serverAfterDelete = afterDelete;
    return result;
  } finally {
    if (ids.length > 0) await server.deleteMany(ids).catch(() => undefined);
  }
}
