import { execFile } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmdirSync,
  rmSync,
  statSync,
  statfsSync,
  truncateSync,
} from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * Disk quotas: every workshop's root directory (workspace, /tmp, home, identity files, its
 * simulators' data) is its own ext4 filesystem, a sparse image file loop-mounted on that
 * directory. Past its size, writes fail inside with ENOSPC and nothing else is touched.
 *
 * Why an image per workshop and not one pool with project quotas: this kernel has neither
 * CONFIG_XFS_QUOTA nor CONFIG_QFMT_V2 (ext4 project quotas), so a pool cannot enforce a limit
 * here; and where it can, a file's owner may change its project id (FS_IOC_FSSETXATTR is allowed
 * to the owner in the initial user namespace, where root-mode workshops run: fs/ioctl.c), which
 * would let an agent step out of its quota. A filesystem of its own has no such door, and a bind from it shows
 * paths relative to it in the workshop's /proc/self/mountinfo (`/workspace`, not the data dir).
 *
 * mkfs + mount cost 50–100 ms on this machine, too much for create → first exec, so the server
 * keeps `spares` formatted and mounted images of the default size and moves one onto a new
 * workshop's root (`mount --move`, a few ms); other sizes are made on demand.
 */
export interface DiskUsage {
  /** Usable bytes of the workshop's filesystem (its quota, less ext4's own metadata). */
  quotaBytes: number;
  usedBytes: number;
}

export interface WorkshopDisksOptions {
  /** Where the images live (DATA_DIR/disks), on the data dir's filesystem. */
  dir: string;
  /** Size of the spares (the server's default quota). */
  defaultBytes: number;
  /** How many formatted, mounted spares to keep ready. */
  spares: number;
  /**
   * Fills a new spare's filesystem (mounted at `root`) in the background, e.g. with copies a
   * workshop's first steps would otherwise make (the simulators' spares). Its files count
   * against the quota of the workshop that takes the spare. The spare is offered at once: a
   * create that takes it meanwhile aborts `signal` and waits for the promise to settle before
   * moving it (what is half-made stays, for the one who made it to clean up). A failure leaves
   * the spare empty.
   */
  prepareSpare?: (root: string, signal: AbortSignal) => Promise<void>;
  /**
   * Runs a command (mount, mkfs…) to its end, rejecting with what it said. Default: execFile,
   * a fork of the server, which stops its event loop for 10–40 ms each time; the server gives
   * its fork helper instead (simulators/spawner.ts), since a create and the refill it sets off
   * run several of these while the workshop's first exec is on its way.
   */
  run?: Runner;
  log: { warn(obj: object, msg?: string): void };
}

/** Runs `argv` (a program on DISK_PATH and its arguments) to its end in `env`. */
export type Runner = (argv: string[], env: Record<string, string>) => Promise<void>;

/** The environment of every command run here. */
const DISK_ENV = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C' };

// Root-owned, nothing setuid or device nodes honoured; discard gives freed blocks back to the host.
const MOUNT_OPTIONS = 'loop,discard,noinit_itable,nosuid,nodev';

const execFileRunner: Runner = (argv, env) =>
  new Promise((resolve, reject) => {
    execFile(argv[0]!, argv.slice(1), { env }, (err, _o, stderr) =>
      err ? reject(new Error(`${argv[0]} ${argv[1] ?? ''} failed: ${String(stderr).trim().slice(0, 300) || err.message}`)) : resolve(),
    );
  });

function output(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { env: DISK_ENV }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd} failed: ${String(stderr).trim().slice(0, 300) || err.message}`)) : resolve(String(stdout)),
    );
  });
}

/** True when `path` is the root of a mounted filesystem (another device than its parent's). */
export function isMountPoint(path: string): boolean {
  try {
    return statSync(path).dev !== statSync(dirname(path)).dev;
  } catch {
    return false;
  }
}

/**
 * How long after a spare is taken its replacement starts: past the create that took it and its
 * first exec. A burst of creates finds no spare and makes its own disks meanwhile.
 */
export const REFILL_DELAY_MS = 1500;

/** A background job's command line: lowest CPU priority, so that a create in progress is never slowed by a refill. */
const BACKGROUND = ['/usr/bin/nice', '-n', '19'];

async function makeImage(run: Runner, image: string, bytes: number, background = false): Promise<void> {
  rmSync(image, { force: true });
  // Sparse: the host gives blocks only as the workshop writes. 1 % reserved for root: the workshop
  // (never root) fills the rest, and the server's own writes at a start (the filter's loader, a
  // simulator's state) still succeed on a full disk, so a full workshop can start again. No resize
  // inode (never grown); inode tables and journal left for lazy init.
  closeSync(openSync(image, 'wx', 0o600));
  truncateSync(image, bytes);
  const mkfs = ['mkfs.ext4', '-q', '-F', '-m', '1', '-O', '^resize_inode', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard', image];
  await run(background ? [...BACKGROUND, ...mkfs] : mkfs, DISK_ENV);
}

async function mountImage(run: Runner, image: string, at: string): Promise<void> {
  await run(['mount', '-o', MOUNT_OPTIONS, image, at], DISK_ENV);
  // The filesystem's root is the workshop's root directory: the server's only, as before.
  chmodSync(at, 0o700);
}

async function unmount(run: Runner, at: string): Promise<void> {
  if (!isMountPoint(at)) return;
  try {
    await run(['umount', at], DISK_ENV);
  } catch {
    // A process of the workshop still holds it (a simulator on its way out): detach now, the
    // kernel frees the loop device when the last one goes.
    await run(['umount', '-l', at], DISK_ENV);
  }
}

/** The images of one server's workshops and its spares. */
export class WorkshopDisks {
  private readonly ready: string[] = [];
  /** Spares being filled by prepareSpare: name → how to stop it and its end. */
  private readonly preparing = new Map<string, { abort: AbortController; done: Promise<void> }>();
  private refilling: Promise<void> | null = null;
  /** The refill a taken spare schedules (see attach). */
  private refillTimer: NodeJS.Timeout | undefined;
  private closed = false;

  private readonly opts: WorkshopDisksOptions;
  private readonly run: Runner;

  constructor(opts: WorkshopDisksOptions) {
    this.opts = { ...opts };
    this.run = opts.run ?? execFileRunner;
  }

  private image(id: string): string {
    return join(this.opts.dir, `${id}.img`);
  }

  /** Reuses the spares left mounted by a previous server process, drops broken ones, fills up. */
  init(): void {
    mkdirSync(this.opts.dir, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(this.opts.dir)) {
      if (!entry.startsWith('spare-') || entry.endsWith('.img')) continue;
      const at = join(this.opts.dir, entry);
      let size = -1;
      try {
        size = statSync(`${at}.img`).size;
      } catch {
        // image gone
      }
      if (isMountPoint(at) && size === this.opts.defaultBytes) this.ready.push(entry);
      else void this.dropSpare(entry);
    }
    this.refill();
  }

  /** Starts filling a ready spare (prepareSpare), stopped by whoever takes or drops it. */
  private prepare(name: string, at: string): void {
    const fill = this.opts.prepareSpare;
    if (!fill) return;
    const abort = new AbortController();
    const done = fill(at, abort.signal)
      .catch((err: unknown) => this.opts.log.warn({ err: String(err) }, 'could not prepare the contents of a spare workshop disk'))
      .finally(() => this.preparing.delete(name));
    this.preparing.set(name, { abort, done });
  }

  /** Stops the filling of a spare, if it runs: its writers use paths that a move or unmount ends. */
  private async stopPreparing(name: string): Promise<void> {
    const p = this.preparing.get(name);
    if (!p) return;
    p.abort.abort();
    await p.done;
  }

  private async dropSpare(name: string): Promise<void> {
    await this.stopPreparing(name);
    const at = join(this.opts.dir, name);
    await unmount(this.run, at).catch(() => undefined);
    rmSync(`${at}.img`, { force: true });
    try {
      rmdirSync(at);
    } catch {
      // already gone
    }
  }

  /** Keeps `spares` ready, one at a time in the background (mkfs and mount are child processes). */
  private refill(): void {
    if (this.refilling || this.closed || this.ready.length >= this.opts.spares) return;
    let failed = false;
    this.refilling = (async () => {
      while (!this.closed && this.ready.length < this.opts.spares) {
        const name = `spare-${process.pid}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
        const at = join(this.opts.dir, name);
        try {
          mkdirSync(at, { mode: 0o700 });
          await makeImage(this.run, `${at}.img`, this.opts.defaultBytes, true);
          await mountImage(this.run, `${at}.img`, at);
          this.ready.push(name);
          this.prepare(name, at);
        } catch (err) {
          this.opts.log.warn({ err: String(err) }, 'could not prepare a spare workshop disk (new workshops make theirs on demand)');
          await this.dropSpare(name);
          failed = true;
          return;
        }
      }
    })().finally(() => {
      this.refilling = null;
      // A spare taken while this round was ending is replaced now (not at the next create).
      if (!failed) this.refill();
    });
  }

  /**
   * Gives the (empty) directory `root` a filesystem of `bytes` of its own: a spare when one of
   * that size is ready, else a new one.
   */
  async attach(id: string, root: string, bytes: number): Promise<void> {
    const image = this.image(id);
    const spare = bytes === this.opts.defaultBytes ? this.ready.shift() : undefined;
    if (spare) {
      const at = join(this.opts.dir, spare);
      try {
        await this.stopPreparing(spare);
        renameSync(`${at}.img`, image);
        await this.run(['mount', '--move', at, root], DISK_ENV);
        rmdirSync(at);
        chmodSync(root, 0o700);
        // Its replacement (mkfs, mount, the simulators' seed copy: niced, but on a 2-core host
        // their I/O still slowed this create and its first exec by ~10 ms) is made a little later.
        this.refillTimer ??= setTimeout(() => {
          this.refillTimer = undefined;
          this.refill();
        }, REFILL_DELAY_MS).unref();
        return;
      } catch (err) {
        // mount --move is refused under a shared mount (systemd hosts): spares cannot help there.
        this.opts.log.warn(
          { err: String(err) },
          'a spare workshop disk could not be moved into place: disks are made on demand from now on',
        );
        this.opts.spares = 0;
        await this.dropSpare(spare);
        for (const name of this.ready.splice(0)) await this.dropSpare(name);
        rmSync(image, { force: true });
      }
    }
    this.refill();
    try {
      await makeImage(this.run, image, bytes);
      await mountImage(this.run, image, root);
    } catch (err) {
      // No half-made image left behind: it would count as this workshop's quota.
      rmSync(image, { force: true });
      throw err;
    }
  }

  /** Mounts the workshop's image again if it is not (the host rebooted). False: it has none. */
  async ensureMounted(id: string, root: string): Promise<boolean> {
    if (isMountPoint(root)) return true;
    try {
      statSync(this.image(id));
    } catch {
      return false;
    }
    // A loop device may still hold the image (lazily unmounted, a process kept it open): mounting
    // that device again gives the same filesystem, where a second loop device would give a second
    // writer of the same image.
    const held = await output('losetup', ['-j', this.image(id)]);
    const device = /^(\/dev\/loop\d+):/m.exec(held)?.[1];
    if (device) {
      await this.run(['mount', '-o', 'nosuid,nodev,discard,noinit_itable', device, root], DISK_ENV);
      chmodSync(root, 0o700);
    } else await mountImage(this.run, this.image(id), root);
    return true;
  }

  /** True when the workshop has a filesystem of its own (created with a quota). */
  has(id: string): boolean {
    try {
      statSync(this.image(id));
      return true;
    } catch {
      return false;
    }
  }

  /** Unmounts the workshop's filesystem and removes its image (its processes are gone). */
  async detach(id: string, root: string): Promise<void> {
    await unmount(this.run, root);
    rmSync(this.image(id), { force: true });
  }

  /**
   * Bytes the workshops' images may still take from the host: each one's size less what it
   * already holds (sparse files grow as their workshops write).
   */
  promisedBytes(): number {
    let total = 0;
    let entries: string[] = [];
    try {
      entries = readdirSync(this.opts.dir);
    } catch {
      return 0;
    }
    for (const e of entries) {
      // A spare is promised to nobody yet: the create that takes it counts its size.
      if (!e.endsWith('.img') || e.startsWith('spare-')) continue;
      try {
        const st = statSync(join(this.opts.dir, e));
        total += Math.max(0, st.size - st.blocks * 512);
      } catch {
        // removed meanwhile
      }
    }
    return total;
  }

  /**
   * Stops making spares and removes them (server shutdown): a data dir is left with mounts only
   * for its workshops, which outlive the server. After a kill -9 the next start reuses them.
   */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.refillTimer);
    await this.refilling;
    for (const name of this.ready.splice(0)) await this.dropSpare(name);
  }
}

/** Usage of the filesystem holding `path` (statfs: the workshop's own when it has one). */
export function diskUsage(path: string): DiskUsage {
  const s = statfsSync(path);
  return { quotaBytes: s.blocks * s.bsize, usedBytes: (s.blocks - s.bfree) * s.bsize };
}

/** Bytes an unprivileged writer may still use on the filesystem holding `path`. */
export function freeBytes(path: string): number {
  const s = statfsSync(path);
  return s.bavail * s.bsize;
}
