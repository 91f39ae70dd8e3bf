import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { setPriority } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { run, SIMULATOR_ENV } from '../process.js';
import { runOffServer, spawnViaHelper } from '../spawner.js';
import type { RunAs } from '../types.js';
import { type SimulatorInstance } from './entry.js';
import {
  adminPasswordFile,
  dataDir,
  installations,
  readTemplate,
  templateDir,
  templates,
  ensureTemplate,
  type Template,
} from './postgresTemplate.js';

// The PostgreSQL simulator's spare copies of its template (postgresTemplate.ts), shared and per workshop.
//
// Spare copies: the copy is most of a start (~100 ms on an idle disk, 1–2 s on a busy one), so
// a few ready-made copies wait next to the template and a start renames one into place.
//
// Bursts: a start that finds the pool empty does not copy on its own beside the refill (two
// copies fighting for the disk, each slower); it waits for the next copy the refill finishes,
// which then runs at normal priority, two at a time while anyone waits, and the pool keeps
// BURST_SPARES instead of SPARES for the next ten minutes. Disk only: ~35 MB a copy.
const SPARES = 3;
const BURST_SPARES = 6;
const BURST_MEMORY_MS = 600_000;
/** A refill not triggered by a start's answer (the start failed) happens after this. */
const REFILL_FALLBACK_MS = 2000;
/** How long after a start's answer the refill waits while the pool still has a spare. */
export const REFILL_DELAY_MS = 300;

interface SparePool {
  dir: string;
  template: Template;
  /** Until when the pool keeps BURST_SPARES. */
  burstUntil: number;
  /** Copies in progress (the pids of their `cp` processes). */
  copying: Set<number>;
  /** Starts waiting for a copy, served first come first served. */
  waiters: Array<{ resolve: (copy: string) => void; reject: (err: Error) => void }>;
  /** The running refill loop, if any. */
  job: Promise<void> | undefined;
  /** Its filesystem is being moved away (a spare disk taken): copies in progress are killed. */
  abandoned?: boolean;
}

const pools = new Map<string, SparePool>();
/**
 * Instance directory → the refill of the pool it took a spare from, run once the instance
 * answered (`urgent`: the pool it took from is empty, with starts perhaps waiting).
 */
export const afterStart = new Map<string, { refill: () => void; urgent: () => boolean }>();

function poolOf(template: Template): SparePool {
  const dir = `${template.dir}.spares`;
  let pool = pools.get(dir);
  if (!pool) {
    pool = { dir, template, burstUntil: 0, copying: new Set(), waiters: [], job: undefined };
    pools.set(dir, pool);
  }
  return pool;
}

function spares(pool: SparePool): string[] {
  try {
    return readdirSync(pool.dir).filter((e) => e.startsWith('spare-'));
  } catch {
    return [];
  }
}

/** Renames a ready spare to `dest`: true when one was there. */
function takeSpare(pool: SparePool, dest: string): boolean {
  for (const entry of spares(pool)) {
    try {
      renameSync(join(pool.dir, entry), dest);
      return true;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') continue; // taken by a concurrent start (another server on the same cache)
      throw err;
    }
  }
  return false;
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // ended meanwhile
  }
}

/** One copy of the template into the pool directory, at the lowest CPU priority unless someone waits for it. */
function copyOnce(pool: SparePool): Promise<string> {
  const copy = join(pool.dir, `.copy-${randomBytes(4).toString('hex')}`);
  const urgent = pool.waiters.length > 0;
  const argv = [...(urgent ? [] : ['/usr/bin/nice', '-n', '19']), '/usr/bin/cp', '-a', pool.template.data, copy];
  const failed = (err: Error): never => {
    // An abandoned copy (its spare disk is being taken) is left for the workshop's next refill or
    // drop to remove: the create waiting for the copy's end should not wait for a removal too.
    if (!pool.abandoned) rmSync(copy, { recursive: true, force: true });
    throw err;
  };
  const track = (pid: number): void => {
    pool.copying.add(pid);
    if (pool.abandoned) killQuietly(pid);
  };
  // Through the spawner when it runs (a fork of the server would stop its event loop meanwhile).
  const viaHelper = spawnViaHelper({ argv, cwd: '/', env: SIMULATOR_ENV, detached: false, awaited: true });
  if (viaHelper) {
    return viaHelper.then(async ({ pid, exit }) => {
      track(pid);
      const code = await exit.finally(() => pool.copying.delete(pid));
      return code === 0 ? copy : failed(new Error(`copying the PostgreSQL template failed (cp: ${code})`));
    });
  }
  return new Promise<string>((resolve, reject) => {
    const child = execFile(argv[0]!, argv.slice(1), (err) => {
      if (child.pid !== undefined) pool.copying.delete(child.pid);
      if (err) reject(err);
      else resolve(copy);
    });
    if (child.pid !== undefined) track(child.pid);
  }).catch(failed);
}

/** Tops the pool up and serves the starts waiting for a copy; one loop per pool; never rejects. */
function refillSpares(template: Template): Promise<void> {
  const pool = poolOf(template);
  pool.job ??= (async () => {
    mkdirSync(pool.dir, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(pool.dir)) {
      const path = join(pool.dir, entry);
      if (entry.startsWith('.copy-') && !pool.copying.size && Date.now() - statSync(path).mtimeMs > 600_000)
        rmSync(path, { recursive: true, force: true });
    }
    const target = (): number => (Date.now() < pool.burstUntil ? BURST_SPARES : SPARES);
    const running = new Set<Promise<void>>();
    let failed: Error | undefined;
    for (;;) {
      const wanted = pool.waiters.length + Math.max(0, target() - spares(pool).length);
      // Two copies at once while starts wait (they share the disk, but not one CPU), else one.
      const parallel = pool.waiters.length > 0 ? 2 : 1;
      while (running.size < Math.min(wanted, parallel)) {
        const one: Promise<void> = copyOnce(pool)
          .then((copy) => {
            const waiter = pool.waiters.shift();
            if (waiter) waiter.resolve(copy);
            else renameSync(copy, join(pool.dir, `spare-${copy.slice(-8)}`));
          })
          .catch((err: Error) => {
            // The disk refused (full?): the starts waiting are told, the pool tries again later.
            for (const w of pool.waiters.splice(0)) w.reject(err);
            failed = err;
          })
          .finally(() => running.delete(one));
        running.add(one);
      }
      if (running.size === 0) return;
      await Promise.race(running);
      if (failed) {
        await Promise.all(running);
        return;
      }
    }
  })()
    .catch(() => undefined)
    .finally(() => {
      pool.job = undefined;
      // A start may have queued after the loop's last look.
      if (pool.waiters.length > 0) void refillSpares(template);
    });
  return pool.job;
}

/**
 * A copy for a start that found the pool empty: the next one the refill finishes (copies in
 * progress are raised to normal priority for it). Returns the copy's path, to rename.
 */
function waitForCopy(pool: SparePool): Promise<string> {
  pool.burstUntil = Date.now() + BURST_MEMORY_MS;
  const copy = new Promise<string>((resolve, reject) => pool.waiters.push({ resolve, reject }));
  for (const pid of pool.copying) {
    try {
      setPriority(pid, 0);
    } catch {
      // not root: a lower nice value is not ours to set; the copy finishes at its pace
    }
  }
  void refillSpares(pool.template);
  return copy;
}

// Workshop pools: a workshop with a disk quota has a filesystem of its own (sandbox/disk.ts), so
// a spare of the shared pool cannot be renamed into its simulators' directory (EXDEV) and a copy
// on the path of the start costs 100 ms idle, 1–2 s busy. Such a workshop keeps at most ONE
// spare of its own, in `<workshop root>/simulators/.spares/<template>/` (a simulator's name
// never starts with a dot), on its filesystem: a start renames it. It is made when its disk is
// prepared (the server's spare disks: before anyone waits) and again after each postgres start
// in that workshop, so only workshops that use postgres keep one (one without postgres among its
// simulators at create drops it). It is a file of the workshop: it counts against its quota
// (~35 MB), and is gone with it. Why not an overlay on the shared template (no copy at all): a
// mount per instance on the host, to undo at every stop, reset and server restart, for ~100 ms
// that a background copy already hides.

/** About what a copy of the template takes (~35 MB), to leave a workshop near its quota alone. */
const SPARE_BYTES = 40 << 20;

/** The pool of the workshop holding `instanceDir`, or undefined when it shares the template's filesystem. */
function workshopPool(instanceDir: string, template: Template): SparePool | undefined {
  const simulatorsDir = dirname(instanceDir);
  try {
    if (statSync(simulatorsDir).dev === statSync(template.dir).dev) return undefined;
  } catch {
    return undefined;
  }
  const dir = join(simulatorsDir, '.spares', basename(template.dir));
  let pool = pools.get(dir);
  if (!pool) {
    pool = { dir, template, burstUntil: 0, copying: new Set(), waiters: [], job: undefined };
    pools.set(dir, pool);
  }
  return pool;
}

/** Makes the workshop's one spare if it has none; one copy at a time per workshop; never rejects. */
function refillWorkshopSpare(pool: SparePool): Promise<void> {
  pool.job ??= (async () => {
    // The simulators' directory is entered by their uids (0711), the spares only by the server.
    mkdirSync(dirname(dirname(pool.dir)), { recursive: true, mode: 0o711 });
    mkdirSync(pool.dir, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(pool.dir)) {
      const path = join(pool.dir, entry);
      if (entry.startsWith('.copy-') && !pool.copying.size) rmSync(path, { recursive: true, force: true });
    }
    if (spares(pool).length > 0 || pool.abandoned) return;
    // A workshop close to its quota gets no spare: it would take the room its own writes need.
    const fs = statfsSync(pool.dir);
    if (fs.bavail * fs.bsize < 2 * SPARE_BYTES + 0.1 * fs.blocks * fs.bsize) return;
    const copy = await copyOnce(pool);
    if (spares(pool).length > 0) rmSync(copy, { recursive: true, force: true });
    else renameSync(copy, join(pool.dir, `spare-${copy.slice(-8)}`));
  })()
    .catch(() => undefined) // the workshop's disk is full: its next start copies
    .finally(() => {
      pool.job = undefined;
    });
  return pool.job;
}

/**
 * The instance's data from its workshop's pool: the spare renamed, or the copy in progress
 * waited for (it is ahead of a new one), or else a copy of its own. Returns 0: the wait is not a
 * burst of the shared pool (what `waitedForCopyMs` warns about); the start's prepareMs shows it.
 */
async function fromWorkshopPool(pool: SparePool, data: string): Promise<number> {
  if (takeSpare(pool, data)) return 0;
  if (pool.job) {
    for (const pid of pool.copying) {
      try {
        setPriority(pid, 0);
      } catch {
        // not root: the copy finishes at its pace
      }
    }
    await pool.job;
    if (takeSpare(pool, data)) return 0;
  }
  await run('cp', ['-a', pool.template.data, data]);
  return 0;
}

/**
 * Prepares the one spare copy of the newest PostgreSQL template on the workshop filesystem of
 * `simulatorsDir` (`<workshop root>/simulators`). Nothing when that directory shares the
 * template's filesystem (the shared pool serves it) or the template is not made yet. Never rejects.
 */
export async function seedPostgresSpare(opts: {
  simulatorsDir: string;
  cacheDir: string;
  signal?: AbortSignal | undefined;
}): Promise<void> {
  const newest = (await installations().catch(() => []))[0];
  if (!newest) return;
  const dir = templateDir(opts.cacheDir, newest);
  const template = await (templates.get(dir)?.catch(() => undefined) ?? readTemplate(dir));
  if (!template) return;
  mkdirSync(opts.simulatorsDir, { recursive: true, mode: 0o711 });
  const pool = workshopPool(join(opts.simulatorsDir, 'postgres'), template);
  if (!pool || opts.signal?.aborted) return;
  const stop = (): void => {
    pool.abandoned = true;
    for (const pid of pool.copying) killQuietly(pid);
  };
  opts.signal?.addEventListener('abort', stop, { once: true });
  await refillWorkshopSpare(pool);
  opts.signal?.removeEventListener('abort', stop);
  // A spare disk moves onto a workshop under another path: its pool is looked up afresh there.
  pools.delete(pool.dir);
}

/** Removes the postgres spares of a workshop that does not use postgres (its quota gets the room back). */
export async function dropPostgresSpares(simulatorsDir: string): Promise<void> {
  const root = join(simulatorsDir, '.spares');
  for (const [dir, pool] of pools) {
    if (!dir.startsWith(`${root}/`)) continue;
    await pool.job;
    pools.delete(dir);
  }
  // Out of the way first, in one rename: a start that comes meanwhile (a live request right after
  // the create) finds no spare and copies its own, never one the removal is half-way through.
  const trash = `${root}-dropped-${randomBytes(4).toString('hex')}`;
  try {
    renameSync(root, trash);
  } catch {
    return; // none there
  }
  // Then at the lowest CPU priority, in a child of its own: the create that dropped it goes on
  // to its first exec meanwhile. GNU rm never follows a link out of the tree.
  await runOffServer(['/usr/bin/nice', '-n', '19', '/usr/bin/rm', '-rf', '--one-file-system', '--', trash], {
    env: SIMULATOR_ENV,
  }).catch(() => rm(trash, { recursive: true, force: true }));
}

/**
 * Replaces the instance's data with a fresh copy of the template. Returns how long it waited
 * for a copy (0 when a spare was ready).
 */
export async function copyTemplate(instance: SimulatorInstance, template: Template): Promise<number> {
  const data = dataDir(instance);
  rmSync(data, { recursive: true, force: true });
  const local = workshopPool(instance.dir, template);
  const waited = local ? await fromWorkshopPool(local, data) : await fromSharedPool(instance, template, data);
  if (local)
    refillAfterStart(
      instance,
      () => void refillWorkshopSpare(local),
      () => false,
    );
  // The data directory only (see openInside): what is inside is reachable through it alone.
  if (instance.runAs) chownSync(data, instance.runAs.uid, instance.runAs.gid);
  chmodSync(data, 0o700);
  writeFileSync(adminPasswordFile(instance), `${template.adminPassword}\n`, { mode: 0o600 });
  return waited;
}

/**
 * Refilled once this start has answered (setUp), or in a while if it never does: the refill's
 * fork and its writes would otherwise compete with this very start.
 */
function refillAfterStart(instance: SimulatorInstance, refill: () => void, urgent: () => boolean): void {
  const entry = { refill, urgent };
  afterStart.set(instance.dir, entry);
  setTimeout(() => {
    if (afterStart.get(instance.dir) !== entry) return;
    afterStart.delete(instance.dir);
    refill();
  }, REFILL_FALLBACK_MS).unref();
}

/** The instance's data from the shared pool beside the template; how long it waited for a copy. */
async function fromSharedPool(instance: SimulatorInstance, template: Template, data: string): Promise<number> {
  const pool = poolOf(template);
  let waited = 0;
  let took = false;
  try {
    took = takeSpare(pool, data);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
    // The instance is on another file system than the cache: a copy of its own.
    await run('cp', ['-a', template.data, data]);
  }
  if (took)
    refillAfterStart(
      instance,
      () => void refillSpares(template),
      () => spares(pool).length === 0,
    );
  else if (!existsSync(data)) {
    const t0 = performance.now();
    const copy = await waitForCopy(pool);
    try {
      renameSync(copy, data);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      // The instance is on another file system than the pool (its workshop's own): the copy goes
      // back to the pool as a spare and the instance gets a copy of its own.
      renameSync(copy, join(pool.dir, `spare-${copy.slice(-8)}`));
      await run('cp', ['-a', template.data, data]);
    }
    waited = performance.now() - t0;
  }
  return waited;
}

/** Creates the template of the newest installed PostgreSQL and its spare copies now (so that the first simulator starts fast). */
export async function warmPostgresTemplate(opts: { cacheDir: string; runAs?: RunAs | undefined }): Promise<void> {
  const all = await installations();
  if (all.length > 0) await refillSpares(await ensureTemplate(opts.cacheDir, all[0]!, opts.runAs));
}
