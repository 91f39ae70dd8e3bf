import { resolve } from 'node:path';
import type { Config } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { preflightChecks, type DoctorCheck } from './doctorChecks.js';
import type { ProbeReport } from './probe.js';
import { printable } from '../../output.js';

export interface DoctorFlags {
  dataDir?: string;
  listen?: string;
  domain?: string;
  databaseUrl?: string;
  probe?: boolean;
  repo?: string;
}

export interface DoctorReport {
  ok: boolean;
  dataDir: string;
  checks: DoctorCheck[];
  /** Set with --probe. */
  probe?: ProbeReport;
  /** The checks' own wall time (without the probe). */
  ms: number;
}

/** `atelier server doctor`: every pre-flight check, then with --probe a synthetic run through the context's server. */
export async function serverDoctor(ctx: CommandContext, config: Config, flags: DoctorFlags): Promise<DoctorReport> {
  const dataDir = resolve(flags.dataDir ?? config.dataDir);
  const databaseUrl = flags.databaseUrl ?? config.databaseUrl;
  const t0 = performance.now();
  const checks = await preflightChecks(config, {
    dataDir,
    listen: flags.listen ?? config.listen,
    ...(flags.domain !== undefined ? { domain: flags.domain } : {}),
    ...(databaseUrl !== undefined ? { databaseUrl } : {}),
  });
  const report: DoctorReport = { ok: true, dataDir, checks, ms: Math.round(performance.now() - t0) };
  if (flags.probe) {
    const { runProbe } = await import('./probe.js');
    report.probe = await runProbe(ctx, flags.repo);
  }
  report.ok = !checks.some((c) => c.status === 'fail') && !(report.probe?.steps.some((s) => s.status === 'fail') ?? false);
  return report;
}

const MARK: Record<DoctorCheck['status'], string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL', skip: 'skip' };

export function doctorText(r: DoctorReport): string {
  const width = Math.max(...r.checks.map((c) => c.name.length));
  const lines: string[] = [];
  for (const c of r.checks) {
    lines.push(`${MARK[c.status]}  ${c.name.padEnd(width)}  ${c.detail}`);
    if (c.fix) lines.push(`${' '.repeat(width + 8)}fix: ${c.fix}`);
  }
  const count = (s: DoctorCheck['status']): number => r.checks.filter((c) => c.status === s).length;
  lines.push('', `${count('ok')} ok, ${count('warn')} warn, ${count('fail')} fail, ${count('skip')} skipped (checks took ${r.ms} ms)`);
  if (r.probe) {
    lines.push('', `probe through ${r.probe.server}${r.probe.workshop ? ` (workshop ${r.probe.workshop})` : ''}:`);
    for (const s of r.probe.steps)
      lines.push(`${MARK[s.status]}  ${s.name.padEnd(12)}  ${`${s.ms} ms`.padStart(8)}  ${printable(s.detail)}`);
  }
  if (!r.ok) lines.push('', 'doctor found problems: fix each FAIL above, then run it again');
  return lines.join('\n');
}
