import { chmodSync, renameSync, writeFileSync } from 'node:fs';

/** Writes `path` whole or not at all (a temporary file renamed over it), with exactly `mode`. */
export function writeFileAtomic(path: string, content: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content, { mode });
  // The umask may have narrowed the mode asked for.
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}
