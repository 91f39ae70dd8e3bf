import type { WorkshopUsage } from './api.ts';

/**
 * The share of the workshop's CPU limit its processes used between two readings of its usage
 * (1 = all its `cpus`, kept busy the whole time), from the growth of their CPU time over the time
 * between the readings as the server stamped them (its clock, not the page's: a reading delayed
 * on the way does not skew it). Undefined for the first reading, a figure the server could not
 * read, or a counter that went back (the workshop started again since).
 */
export function cpuShare(
  before: Pick<WorkshopUsage, 'at' | 'cpuUsec'> | undefined,
  now: Pick<WorkshopUsage, 'at' | 'cpuUsec'>,
  cpus: number,
): number | undefined {
  if (!before || before.cpuUsec === null || now.cpuUsec === null || cpus <= 0) return undefined;
  const elapsedMs = Date.parse(now.at) - Date.parse(before.at);
  const usedUsec = now.cpuUsec - before.cpuUsec;
  if (!(elapsedMs > 0) || usedUsec < 0) return undefined;
  return usedUsec / (elapsedMs * 1000) / cpus;
}

/** CPU time for people: `0.42 s`, `12.3 s`, `4 min 05 s`, `2 h 07 min`. */
export function cpuTime(usec: number): string {
  const s = usec / 1e6;
  if (s < 10) return `${s.toFixed(2)} s`;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}
