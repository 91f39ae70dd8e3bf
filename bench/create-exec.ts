/**
 * 1. Create → first exec completed: POST /v1/workshops, then POST …/exec `true`, end to end,
 * beside a fresh bare `bwrap … true` and a fresh `srt true` (each of those is also "a new
 * sandbox that ran one command"). Atelier's figure includes the git clone of a two-file
 * repository, its database rows, its cgroups and the HTTP round trips.
 */
import { join } from 'node:path';
import { BenchServer, goalLine, heading, line, makeScratch, ms, ratioLine, removeScratch, statLine, summarize, timedSpawn } from './lib.js';
import { bwrapAvailable, probeSrt, runBareBwrap, runSrt } from './peers.js';

const ROUNDS = 20;
const GOAL_P50_MS = 150;

interface Rounds {
  total: number[];
  createOnly: number[];
  execOnly: number[];
  cold: number;
  deletes: number[];
}

/**
 * ROUNDS creates, each followed by its first exec, one after the other. `pauseMs` between rounds
 * (outside the timings) lets the server make its next spare disk, as between two users' creates.
 */
async function rounds(server: BenchServer, pauseMs = 0): Promise<Rounds> {
  const ids: string[] = [];
  const r: Rounds = { total: [], createOnly: [], execOnly: [], cold: Number.NaN, deletes: [] };
  try {
    // One cold round first (JIT, first clone, first cgroup): shown, not counted.
    for (let i = 0; i <= ROUNDS; i++) {
      if (pauseMs > 0) await new Promise((res) => setTimeout(res, pauseMs));
      const t0 = performance.now();
      const ws = await server.createWorkshop();
      ids.push(ws.id);
      const t1 = performance.now();
      await server.exec(ws.id, ['true']);
      const t2 = performance.now();
      if (i === 0) {
        r.cold = t2 - t0;
        continue;
      }
      r.total.push(t2 - t0);
      r.createOnly.push(t1 - t0);
      r.execOnly.push(t2 - t1);
    }
  } finally {
    // Delete them now (in parallel) so that the next benchmarks start from an empty server.
    r.deletes = await server.deleteMany(ids).catch((err: Error) => {
      line(`delete failed: ${err.message}`);
      return [] as number[];
    });
  }
  return r;
}

/** The same rounds on a second server of this run without disk quotas (ATELIER_DISK_QUOTA=off). */
async function withoutQuota(): Promise<Rounds | string> {
  const scratch = makeScratch();
  let other: BenchServer | undefined;
  try {
    other = await BenchServer.start(scratch, { ATELIER_DISK_QUOTA: 'off' });
    return await rounds(other);
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  } finally {
    if (other) for (const p of [...(await other.shutdown()), ...(await other.sweep())]) line(`clean-up: ${p}`);
    for (const p of await removeScratch(scratch)) line(`clean-up: ${p}`);
  }
}

export async function createExec(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`1. create -> first exec completed (${ROUNDS} workshops; goal p50 < ${GOAL_P50_MS} ms)`);
  // Quotas on (the server's default): a pause between rounds lets each create find a spare disk.
  const spared = await rounds(server, 400);
  const { total, createOnly, execOnly, cold } = spared;
  const s = summarize(total);
  statLine('atelier', 'create + exec `true` (HTTP, end to end; disk quota, spare ready)', s, ['p50', 'p95']);
  statLine('', '  of which POST /v1/workshops', summarize(createOnly), ['p50', 'p95']);
  statLine('', '  of which first POST …/exec', summarize(execOnly), ['p50', 'p95']);
  line(`         cold first round (excluded above): ${ms(cold)}`);
  const result: Record<string, unknown> = { atelier: s, createOnly: summarize(createOnly), execOnly: summarize(execOnly), cold };
  // Back to back: the spares run out and most creates make their disk (mkfs + mount) on demand.
  const burst = await rounds(server);
  const bs0 = summarize(burst.total);
  statLine('', 'the same back to back (disks mostly made on demand)', bs0, ['p50', 'p95']);
  result.burst = bs0;
  const off = await withoutQuota();
  if (typeof off === 'string') {
    line(`no-quota skipped: ${off}`);
    result.noQuota = { skipped: off };
  } else {
    const ns = summarize(off.total);
    statLine('atelier', 'the same without disk quotas (ATELIER_DISK_QUOTA=off, second server)', ns, ['p50', 'p95']);
    ratioLine('with quota (spare) / without (p50)', s.p50, ns.p50);
    line(`         quota cost at p50: ${ms(s.p50 - ns.p50)} (spare ready), ${ms(bs0.p50 - ns.p50)} (back to back)`);
    result.noQuota = ns;
  }
  const deletes = spared.deletes;
  // The clone alone, as src/workshops/repo.ts runs it: how much of the create it is.
  const clones: number[] = [];
  for (let i = 0; i < ROUNDS + 2; i++) {
    const r = await timedSpawn(
      'git',
      [
        '-c',
        'safe.directory=*',
        '-c',
        'protocol.file.allow=always',
        'clone',
        '--quiet',
        '--no-hardlinks',
        '--',
        server.scratch.repo,
        join(server.scratch.dir, 'clones', String(i)),
      ],
      {
        env: { PATH: '/usr/bin:/bin', GIT_TERMINAL_PROMPT: '0', HOME: '/nonexistent', LANG: 'C' },
      },
    );
    if (r.code !== 0) throw new Error(`git clone failed: ${r.stderr.trim()}`);
    if (i >= 2) clones.push(r.ms);
  }
  const cs = summarize(clones);
  statLine('(ref)', '`git clone --no-hardlinks` of the same repo', cs, ['p50', 'p95']);
  result.gitClone = cs;

  const noBwrap = bwrapAvailable();
  if (noBwrap) {
    line(`bwrap    skipped: ${noBwrap}`);
  } else {
    for (let i = 0; i < 3; i++) await runBareBwrap();
    const b: number[] = [];
    for (let i = 0; i < ROUNDS; i++) b.push(await runBareBwrap());
    const bs = summarize(b);
    statLine('bwrap', 'bare `bwrap … true` (fresh sandbox)', bs, ['p50', 'p95']);
    ratioLine('atelier / bare bwrap (p50)', s.p50, bs.p50);
    result.bwrap = bs;
  }

  const probe = await probeSrt(server.scratch.dir);
  if ('skip' in probe) {
    line(`srt      skipped: ${probe.skip}`);
    result.srt = { skipped: probe.skip };
  } else {
    if (probe.srt.note) line(`srt      note: ${probe.srt.note}`);
    for (let i = 0; i < 2; i++) await runSrt(probe.srt);
    const r: number[] = [];
    for (let i = 0; i < ROUNDS; i++) r.push(await runSrt(probe.srt));
    const rs = summarize(r);
    statLine('srt', `\`srt true\` (srt ${probe.srt.version}, fresh sandbox)`, rs, ['p50', 'p95']);
    ratioLine('atelier / srt (p50)', s.p50, rs.p50);
    result.srt = { ...rs, version: probe.srt.version, note: probe.srt.note };
  }
  goalLine(`create -> first exec p50 < ${GOAL_P50_MS} ms`, s.p50, GOAL_P50_MS);
  if (deletes.length > 0) {
    const d = summarize(deletes);
    line(`(info) DELETE /v1/workshops/:id, ${deletes.length} at up to 10 in parallel: p50 ${ms(d.p50)}, max ${ms(d.max)}`);
    result.delete = d;
  }
  return result;
}
