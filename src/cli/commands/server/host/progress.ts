// Progress of the steps that can measure themselves (a download, an unpack, a database backup or
// restore): how far they are (`done` of `total`), sampled while the work runs. The emitter
// (engine.ts) draws it as a bar on a terminal and throttles it as JSON events.
import { readFileSync, readdirSync, readlinkSync, statSync } from 'node:fs';

/** Reports how far a step is: `done` of `total` (total undefined: not known in advance). */
export type Progress = (done: number, total?: number) => void;

/** A size for people: 512 B, 12.3 MB. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

/** `width` cells: the done fraction filled, the rest light. */
export function bar(fraction: number, width: number): string {
  const f = Math.min(1, Math.max(0, fraction));
  const full = Math.round(f * width);
  return '█'.repeat(full) + '░'.repeat(width - full);
}

/** `pid` and its descendants (tar hands its archive to a gzip it starts). */
function family(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length && out.length < 64; i++) {
    try {
      for (const task of readdirSync(`/proc/${out[i]}/task`))
        for (const child of readFileSync(`/proc/${out[i]}/task/${task}/children`, 'utf8').trim().split(/\s+/))
          if (child !== '') out.push(Number(child));
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}

/**
 * How far process `pid` (or a process it started) has read `path`: the offset of the descriptor
 * it holds on it (/proc/PID/fdinfo's `pos`). Lets a tool that reads a file by itself (tar,
 * pg_restore) be measured without putting a pipe between it and its input.
 */
export function readOffset(pid: number | undefined, path: string): number | undefined {
  if (pid === undefined) return undefined;
  for (const p of family(pid)) {
    try {
      for (const fd of readdirSync(`/proc/${p}/fd`)) {
        let target: string;
        try {
          target = readlinkSync(`/proc/${p}/fd/${fd}`);
        } catch {
          continue;
        }
        if (target !== path) continue;
        const pos = /^pos:\s*(\d+)/m.exec(readFileSync(`/proc/${p}/fdinfo/${fd}`, 'utf8'))?.[1];
        if (pos !== undefined) return Number(pos);
      }
    } catch {
      // The process has ended, or is not ours to look at.
    }
  }
  return undefined;
}

/** The size of `path` (0 while it does not exist yet). */
export function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/**
 * Runs `work`, reporting `sample()` every `everyMs` while it runs and `total` once it is done
 * (a sample may stop short of it: a compressed dump is smaller than the database it holds).
 */
export async function whileRunning<T>(
  work: Promise<T>,
  sample: () => number | undefined,
  progress: Progress,
  total: number | undefined,
  everyMs = 200,
): Promise<T> {
  const timer = setInterval(() => {
    const n = sample();
    if (n !== undefined) progress(total !== undefined ? Math.min(n, total) : n, total);
  }, everyMs);
  try {
    const r = await work;
    if (total !== undefined) progress(total, total);
    return r;
  } finally {
    clearInterval(timer);
  }
}
