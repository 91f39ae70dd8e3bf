import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer, makeRepo } from './helpers/server.js';

// A workshop with a disk quota is a filesystem of its own: the postgres simulator's spare copy of
// its template lives there (a rename from the shared pool would cross filesystems), is renamed by
// the start, refilled after it, and counted in the workshop's disk usage like any of its files.

interface Disk {
  enforced: boolean;
  quotaBytes: number | null;
  usedBytes: number | null;
}

async function until<T>(what: string, probe: () => T | undefined, ms = 120_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The postgres spare under a simulators directory (`<root>/simulators`), if one is ready. */
function spareIn(simulatorsDir: string): string | undefined {
  const pools = join(simulatorsDir, '.spares');
  if (!existsSync(pools)) return undefined;
  for (const key of readdirSync(pools)) {
    const spare = readdirSync(join(pools, key)).find((e) => e.startsWith('spare-'));
    if (spare) return join(pools, key, spare);
  }
  return undefined;
}

/** Bytes a directory takes on its filesystem (du). */
function duBytes(dir: string): number {
  return Number(execFileSync('du', ['-s', '-B1', dir], { encoding: 'utf8' }).split('\t')[0]);
}

describe('postgres simulator in a workshop with a disk quota', () => {
  let server: TestServer;
  let repo: string;
  const root = (id: string): string => join(server.dataDir, 'workshops', id);
  const disk = async (id: string): Promise<Disk> => (await server.api<{ disk: Disk }>('GET', `/v1/workshops/${id}`)).body.disk;

  before(async () => {
    server = await TestServer.start({ env: { ATELIER_DEFAULT_DISK: '400m' } });
    repo = makeRepo();
  });
  after(async () => {
    await server?.dispose();
  });

  it('starts from a spare on the workshop filesystem (renamed, not copied), refilled after the start, counted in its usage', async () => {
    // The first start makes the template; its workshop's spare comes after it.
    const first = await server.createWorkshop({ repo, simulators: [{ name: 'postgres' }] });
    assert.equal(first.status, 'Running', first.statusReason ?? '');
    const cache = join(server.dataDir, 'simulators', 'cache');
    const ownSpare = await until('the spare of the first workshop', () => spareIn(join(root(first.id), 'simulators')));
    assert.equal(statSync(ownSpare).dev, statSync(root(first.id)).dev, 'the spare is on the workshop filesystem');
    assert.notEqual(statSync(ownSpare).dev, statSync(cache).dev, 'the workshop has a filesystem of its own');

    // The spare disks made from now on carry a spare too: one without postgres gives it back.
    const plain = await server.createWorkshop({ repo });
    assert.equal(plain.status, 'Running', plain.statusReason ?? '');
    const disks = join(server.dataDir, 'disks');
    const seeded = (): string | undefined => {
      for (const d of readdirSync(disks)) {
        if (!d.startsWith('spare-') || d.endsWith('.img')) continue;
        const s = spareIn(join(disks, d, 'simulators'));
        if (s) return s;
      }
      return undefined;
    };
    await until('a spare disk with a postgres spare', seeded);
    const without = await server.createWorkshop({ repo });
    assert.equal(without.status, 'Running', without.statusReason ?? '');
    await until('the unused spare to be removed', () => (existsSync(join(root(without.id), 'simulators', '.spares')) ? undefined : true));

    // The next workshop's disk has one before it exists: its first start renames it (same inode).
    const spare = await until('the next spare disk with a postgres spare', seeded);
    const spareIno = statSync(spare).ino;
    const spareBytes = duBytes(spare);
    const ws = await server.createWorkshop({ repo, simulators: [{ name: 'postgres' }] });
    assert.equal(ws.status, 'Running', ws.statusReason ?? '');
    const data = join(root(ws.id), 'simulators', 'postgres', 'data');
    assert.equal(statSync(data).ino, spareIno, 'the data directory is the spare, renamed');
    assert.equal(statSync(data).dev, statSync(root(ws.id)).dev);
    const q = await server.exec(ws.id, ['sh', '-c', 'psql -tAc "select 1"']);
    assert.equal(q.stdout.trim(), '1', q.stderr);

    // Refilled in the background, one spare only, on the same filesystem; the workshop pays for it.
    const refill = await until('the refill after the start', () => spareIn(join(root(ws.id), 'simulators')));
    assert.equal(statSync(refill).dev, statSync(root(ws.id)).dev);
    assert.equal(readdirSync(join(refill, '..')).filter((e) => e.startsWith('spare-')).length, 1);
    const used = (await disk(ws.id)).usedBytes!;
    const usedPlain = (await disk(without.id)).usedBytes!;
    assert.ok(
      used - usedPlain >= 0.9 * (duBytes(refill) + duBytes(data)),
      `the spare counts in the workshop's usage: ${used} - ${usedPlain} vs ${duBytes(refill)} + ${duBytes(data)}`,
    );
    assert.ok(spareBytes > 10 << 20, `a spare is a whole cluster (${spareBytes} bytes)`);

    // A reset takes the refilled spare in turn.
    const refillIno = statSync(refill).ino;
    assert.equal((await server.cli(['simulators', 'reset', ws.id, 'postgres'])).code, 0);
    assert.equal(statSync(data).ino, refillIno, 'the reset renamed the refilled spare');
  });

  it('stops seeding spare disks once no workshop has a postgres simulator', async () => {
    const list = await server.api<{ items: { id: string }[] }>('GET', '/v1/workshops');
    for (const w of list.body.items) {
      const del = await server.api('DELETE', `/v1/workshops/${w.id}`);
      assert.ok(del.status < 300, JSON.stringify(del.body)); // answered once its rows are gone
    }
    // The spare ready now was seeded while postgres was in use: a workshop takes it…
    const taker = await server.createWorkshop({ repo });
    assert.equal(taker.status, 'Running', taker.statusReason ?? '');
    // …and the next one is made with no postgres simulator anywhere: mounted, and left empty.
    const disks = join(server.dataDir, 'disks');
    const mounted = (d: string): boolean => {
      try {
        return statSync(join(disks, d)).dev !== statSync(disks).dev;
      } catch {
        return false; // dropped meanwhile
      }
    };
    await until('the next spare disk, mounted', () =>
      readdirSync(disks).find((d) => d.startsWith('spare-') && !d.endsWith('.img') && mounted(d)),
    );
    const ws = await server.createWorkshop({ repo });
    assert.equal(ws.status, 'Running', ws.statusReason ?? '');
    assert.equal(existsSync(join(root(ws.id), 'simulators', '.spares')), false, 'no postgres spare was copied into its disk');
  });
});
