import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cgroupBase, createCgroups, destroyCgroups, procsFiles, workshopCgroups } from '../src/sandbox/index.js';
import { LocalDriver } from '../src/workshops/local/driver.js';

// What the local driver reports a workshop uses (GET /v1/workshops/:id/usage), read from real
// cgroups made as a workshop's are, with real processes in them: the memory a shell holds, the
// CPU time it spent, how many processes run; nothing, saying why, without cgroups (rootless) and
// once the workshop's cgroups are gone. The dashboard's test reads the same through a workshop.

const MiB = 2 ** 20;

describe('workshop usage from its cgroups (local driver)', () => {
  const dataDir = mkdtempSync('/tmp/atelier-usage-');
  const nodeId = `node-usage-${process.pid}`;
  let holder: ChildProcess | undefined;
  after(async () => {
    holder?.kill('SIGKILL');
    // Whatever a failed run left: the processes killed, the cgroups removed.
    await destroyCgroups(workshopCgroups(cgroupBase(nodeId), 'ws-usagegone'));
    new LocalDriver(dataDir, nodeId, false, true).releaseCgroupBase();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('a rootless server measures nothing and says why', () => {
    const u = new LocalDriver(dataDir, nodeId, true, false).usageOf('ws-rootless1');
    assert.deepEqual({ ...u, note: null }, { memoryBytes: null, memoryPeakBytes: null, cpuUsec: null, pids: null, note: null });
    assert.match(u.note ?? '', /rootless server makes no cgroups per workshop/);
  });

  it('memory held, CPU time spent and processes running in the cgroups, then nothing once they are gone', async () => {
    const driver = new LocalDriver(dataDir, nodeId, false, true);
    const id = 'ws-usagegone';
    const paths = createCgroups(cgroupBase(nodeId), id, { cpus: 1, memoryBytes: 256 * MiB, pids: 16 });
    // Joins every cgroup a workshop's process joins (cpuacct's too, where it is a hierarchy of
    // its own), then holds 40 MB in a shell variable while its `sleep` waits: two processes.
    holder = spawn(
      '/bin/sh',
      [
        '-c',
        'for f in "$@"; do echo $$ > "$f" || exit 111; done; a=$(head -c 40000000 /dev/zero | tr "\\0" a); sleep 600 & echo held; wait; echo ${#a}',
        'sh',
        ...procsFiles(paths),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((resolve, reject) => {
      holder!.stdout!.on('data', (c: Buffer) => c.toString().includes('held') && resolve());
      holder!.once('exit', (code) => reject(new Error(`the holder exited (${code}) before holding its memory`)));
    });
    const u = driver.usageOf(id);
    assert.equal(u.note, null, 'every figure is read');
    assert.ok(u.memoryBytes! >= 40_000_000, `memory ${u.memoryBytes}`);
    assert.ok(u.memoryBytes! <= 256 * MiB);
    assert.ok(u.memoryPeakBytes! >= u.memoryBytes!, `peak ${u.memoryPeakBytes} below ${u.memoryBytes}`);
    // The shell and its sleep (head and tr ran and ended: their CPU time stays counted).
    assert.equal(u.pids, 2);
    assert.ok(u.cpuUsec! > 0, `cpu ${u.cpuUsec}`);

    holder.kill('SIGKILL');
    await destroyCgroups(paths);
    const gone = driver.usageOf(id);
    assert.deepEqual([gone.memoryBytes, gone.memoryPeakBytes, gone.cpuUsec, gone.pids], [null, null, null, null]);
    assert.match(gone.note ?? '', /no cgroups on its node now/);
  });
});
