/**
 * 1. Create → first exec completed: POST /v1/workshops, then POST …/exec `true`, end to end,
 * beside a fresh bare `bwrap … true` and a fresh `srt true` (each of those is also "a new
 * sandbox that ran one command"). Atelier's figure includes the git clone of a two-file
 * repository, its database rows, its cgroups and the HTTP round trips.
 */
import { join } from 'node:path';
import { goalLine, heading, line, ms, ratioLine, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';
import { bwrapAvailable, probeSrt, runBareBwrap, runSrt } from './peers.js';

const ROUNDS = 20;
const GOAL_P50_MS = 150;

export async function createExec(server: BenchServer): Promise<Record<string, unknown>> {
  heading(`1. create -> first exec completed (${ROUNDS} workshops; goal p50 < ${GOAL_P50_MS} ms)`);
  const ids: string[] = [];
  const total: number[] = [];
  const createOnly: number[] = [];
  const execOnly: number[] = [];
  let cold = Number.NaN;
  let deletes: number[] = [];
  try {
    // One cold round first (JIT, first clone, first cgroup): shown, not counted.
    for (let i = 0; i <= ROUNDS; i++) {
      const t0 = performance.now();
      const ws = await server.createWorkshop();
      ids.push(ws.id);
      const t1 = performance.now();
      await server.exec(ws.id, ['true']);
      const t2 = performance.now();
      if (i === 0) {
        cold = t2 - t0;
        continue;
      }
      total.push(t2 - t0);
      createOnly.push(t1 - t0);
      execOnly.push(t2 - t1);
    }
  } finally {
    // Delete them now (in parallel) so that the next benchmarks start from an empty server.
    deletes = await server.deleteMany(ids).catch((err: Error) => {
      line(`delete failed: ${err.message}`);
      return [] as number[];
    });
  }
  const s = summarize(total);
  statLine('atelier', 'create + exec `true` (HTTP, end to end)', s, ['p50', 'p95']);
  statLine('', '  of which POST /v1/workshops', summarize(createOnly), ['p50', 'p95']);
  statLine('', '  of which first POST …/exec', summarize(execOnly), ['p50', 'p95']);
  line(`         cold first round (excluded above): ${ms(cold)}`);
  const result: Record<string, unknown> = { atelier: s, createOnly: summarize(createOnly), execOnly: summarize(execOnly), cold };
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
