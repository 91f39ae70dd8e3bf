import { chmodSync, rmSync, renameSync, writeFileSync } from 'node:fs';

/**
 * Writes `path` whole or not at all (a temporary file renamed over it), with exactly `mode`. A
 * failed write (disk full) removes its temporary file and leaves `path` as it was.
 */
export function writeFileAtomic(path: string, content: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    writeFileSync(tmp, content, { mode, flush: true });
    // The umask may have narrowed the mode asked for.
    chmodSync(tmp, mode);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}
