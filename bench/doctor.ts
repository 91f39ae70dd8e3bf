/**
 * 16. `atelier server doctor` (issue 20): its checks alone (goal under 2 s), and its probe's
 * steps (create → exec → port-forward → suspend → resume → delete, timed by the probe inside one
 * CLI process) beside the same steps run as a user runs them, one CLI command each (`workshops
 * create`, `exec -- true`, `exec` of the same listener with `port-forward --stdio` reading its
 * greeting, `workshops stop`, `workshops resume` then `exec -- true`, `workshops delete`), in one
 * run, against the benchmark's server. The difference per step is what a CLI start costs on top
 * (the peer: the probe's own figure, with the CLI started once). Rounds alternate the two ways.
 */
import { GREETING, LISTENER, PROBE_PORT } from '../src/cli/commands/server/probe.js';
import { goalLine, heading, line, ATELIER_BIN, statLine, summarize, timedSpawn, type BenchServer } from './lib.js';

const ROUNDS = 5;
const GOAL_CHECKS_MS = 2000;
const STEPS = ['create', 'exec', 'port-forward', 'suspend', 'resume', 'delete'] as const;
type Step = (typeof STEPS)[number];

interface ProbeJson {
  probe?: { steps: Array<{ name: Step; status: string; ms: number; detail: string }> };
}

export async function doctor(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `16. server doctor: checks (goal < ${GOAL_CHECKS_MS} ms) and the probe's steps beside the same steps through the CLI (${ROUNDS} rounds)`,
  );
  const env = server.cliEnv();
  const cli = async (args: string[], timeoutMs = 120_000): Promise<{ ms: number; stdout: string }> => {
    const r = await timedSpawn(ATELIER_BIN, args, { env }, timeoutMs);
    if (r.code !== 0) throw new Error(`atelier ${args.join(' ')} exited ${r.code}: ${r.stderr.slice(0, 300)}`);
    return { ms: r.ms, stdout: r.stdout };
  };

  const checks: number[] = [];
  const probe: Record<Step, number[]> = { create: [], exec: [], 'port-forward': [], suspend: [], resume: [], delete: [] };
  const viaCli: Record<Step, number[]> = { create: [], exec: [], 'port-forward': [], suspend: [], resume: [], delete: [] };
  let seq = 0;

  const cliRound = async (): Promise<void> => {
    const name = `doctor-cli-${process.pid}-${++seq}`;
    const created = await cli([
      'workshops',
      'create',
      '--repo',
      server.scratch.repo,
      '--name',
      name,
      '--memory',
      '256m',
      '--output',
      'json',
    ]);
    const id = (JSON.parse(created.stdout) as { id: string }).id;
    try {
      viaCli.create.push(created.ms);
      viaCli.exec.push((await cli(['exec', id, '--', 'true'])).ms);
      const t0 = performance.now();
      const listener = cli(['exec', id, '--', 'python3', '-c', LISTENER]);
      listener.catch(() => undefined);
      for (;;) {
        // The listener may not be up yet: `port-forward --stdio` then fails and is run again, as a user would.
        const r = await timedSpawn(ATELIER_BIN, ['port-forward', '--stdio', id, String(PROBE_PORT)], { env }, 30_000);
        if (r.code === 0 && r.stdout.includes(GREETING)) break;
        if (performance.now() - t0 > 20_000) throw new Error(`port-forward --stdio never got the greeting: ${r.stderr.slice(0, 200)}`);
      }
      await listener;
      viaCli['port-forward'].push(performance.now() - t0);
      viaCli.suspend.push((await cli(['workshops', 'stop', id])).ms);
      const t1 = performance.now();
      await cli(['workshops', 'resume', id]);
      await cli(['exec', id, '--', 'true']);
      viaCli.resume.push(performance.now() - t1);
    } finally {
      viaCli.delete.push((await cli(['workshops', 'delete', id])).ms);
    }
  };

  const probeRound = async (): Promise<void> => {
    // Exit 1 also when a check of the machine fails (no KVM, say): the probe's steps are in the JSON all the same.
    const r = await timedSpawn(
      ATELIER_BIN,
      ['server', 'doctor', '--probe', '--repo', server.scratch.repo, '--output', 'json'],
      { env },
      300_000,
    );
    const steps = (JSON.parse(r.stdout) as ProbeJson).probe?.steps ?? [];
    for (const s of steps) {
      if (s.status !== 'ok') throw new Error(`the probe's ${s.name} step: ${s.status} (${s.detail})`);
      probe[s.name].push(s.ms);
    }
  };

  for (let i = 0; i < ROUNDS; i++) {
    const r = await timedSpawn(ATELIER_BIN, ['server', 'doctor', '--output', 'json'], { env }, 60_000);
    checks.push(r.ms);
    if (i % 2 === 0) {
      await probeRound();
      await cliRound();
    } else {
      await cliRound();
      await probeRound();
    }
  }
  const c = summarize(checks);
  statLine('atelier', '`server doctor` (every check, no probe)', c, ['p50', 'p95']);
  const result: Record<string, unknown> = { checks: c };
  for (const s of STEPS) {
    const p = summarize(probe[s]);
    const v = summarize(viaCli[s]);
    line(
      `  ${s.padEnd(13)} probe p50 ${p.p50.toFixed(1).padStart(7)} ms   through the CLI p50 ${v.p50.toFixed(1).padStart(7)} ms   (+${(v.p50 - p.p50).toFixed(1)} ms)`,
    );
    result[s] = { probe: p, cli: v };
  }
  goalLine('doctor without its probe p50 <', c.p50, GOAL_CHECKS_MS);
  return result;
}
