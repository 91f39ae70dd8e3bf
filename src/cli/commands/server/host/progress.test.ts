import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bar, formatBytes, readOffset } from './progress.js';

describe('install progress: the measures', () => {
  it('readOffset: how far a process started by the one given has read a file (tar hands its archive to gzip)', async (t) => {
    const dir = mkdtempSync('/tmp/atelier-progress-');
    const file = join(dir, 'archive');
    writeFileSync(file, Buffer.alloc(64 * 1024));
    // The shell given holds nothing open on the file; the shell it starts reads 1000 bytes of it
    // (dd through its descriptor 3) and keeps that descriptor while it sleeps.
    const outer = spawn('sh', ['-c', `sh -c 'exec 3<"$0"; dd bs=1000 count=1 of=/dev/null <&3 2>/dev/null; sleep 60' "${file}" & wait`], {
      detached: true,
      stdio: 'ignore',
    });
    t.after(() => {
      process.kill(-outer.pid!, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    });
    let pos: number | undefined;
    for (let i = 0; i < 200 && pos !== 1000; i++) {
      pos = readOffset(outer.pid, file);
      if (pos !== 1000) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(pos, 1000);
    assert.equal(readOffset(outer.pid, join(dir, 'other')), undefined, 'a file it does not read');
    assert.equal(readOffset(undefined, file), undefined);
  });

  it('formats sizes and bars', () => {
    assert.deepEqual([0, 1023, 1024, 1536 * 1024, 3 * 1024 ** 3].map(formatBytes), ['0 B', '1023 B', '1.0 kB', '1.5 MB', '3.0 GB']);
    assert.equal(bar(0.5, 10), '█████░░░░░');
    assert.equal(bar(2, 4), '████', 'past the end: full');
    assert.equal(bar(-1, 4), '░░░░');
  });
});
