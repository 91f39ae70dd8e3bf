/**
 * Death: a sandbox whose init ended is Dead, with the reason, until it is resumed. Watches the
 * sandboxes of this server, and says why one found gone at start is gone.
 */
import { readFileSync } from 'node:fs';
import { queryRows, type Pool } from '../db/index.js';
import { type SandboxHandle } from '../sandbox/index.js';
import type { WorkshopDriver } from './driver.js';
import type { ServiceOptions, WorkshopRow, WorkshopShared } from './shared.js';

/** When the host booted (btime of /proc/stat), undefined if unreadable. */
function hostBootTime(): Date | undefined {
  try {
    const m = /^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'));
    return m ? new Date(Number(m[1]) * 1000) : undefined;
  } catch {
    return undefined;
  }
}

/** A sandbox this server watches for death, its memory cgroup's OOM kills at the last look, and when that count last grew. */
interface Watched {
  handle: SandboxHandle;
  oomKills: number | undefined;
  /** performance.now() of the look that saw the count grow (the OOM killer ran in it then). */
  oomSeenAt: number | undefined;
}

/**
 * An OOM kill seen this long before a death is taken as its cause: the killer may have killed
 * the init's child a moment before the init itself exited, between two looks.
 */
const OOM_DEATH_WINDOW_MS = 3000;
/** How often the sandboxes of this server are looked at: "Dead within seconds" at ~70 µs per sandbox per look. */
const DEATH_CHECK_MS = 1000;

export class DeathWatch {
  /** Running and suspended sandboxes of this server (only the node that runs a sandbox decides it died). */
  private readonly watched = new Map<string, Watched>();
  private deathTimer: NodeJS.Timeout | undefined;
  private readonly pool: Pool;
  private readonly driver: WorkshopDriver;
  private readonly opts: ServiceOptions;

  constructor(private readonly shared: WorkshopShared) {
    this.pool = shared.pool;
    this.driver = shared.driver;
    this.opts = shared.opts;
  }

  watch(id: string, handle: SandboxHandle): void {
    this.watched.set(id, { handle, oomKills: this.driver.oomKills(handle), oomSeenAt: undefined });
  }

  /** Stops watching a workshop's sandbox (it is being deleted). */
  unwatch(id: string): void {
    this.watched.delete(id);
  }

  /**
   * Every second (DEATH_CHECK_MS): one /proc read per sandbox of this server, and its OOM counter;
   * the database is touched only for one that died. The timer never keeps the process alive.
   */
  start(): void {
    if (this.deathTimer) return;
    this.deathTimer = setInterval(() => {
      for (const [id, w] of this.watched) {
        if (this.driver.alive(w.handle)) {
          const kills = this.driver.oomKills(w.handle);
          if (kills !== undefined && kills > (w.oomKills ?? 0)) {
            w.oomKills = kills;
            w.oomSeenAt = performance.now();
          }
          continue;
        }
        this.watched.delete(id);
        void this.noticeDeath(id, w, this.oomDeath(w));
      }
    }, DEATH_CHECK_MS);
    this.deathTimer.unref();
  }

  /** Stops looking and forgets every sandbox (at shutdown). */
  stop(): void {
    if (this.deathTimer) clearInterval(this.deathTimer);
    this.deathTimer = undefined;
    this.watched.clear();
  }

  /** True when the OOM killer ran in the sandbox's memory cgroup since the last look, or in the few seconds before it died. */
  private oomDeath(w: Watched): boolean {
    const now = this.driver.oomKills(w.handle);
    if (now !== undefined && now > (w.oomKills ?? 0)) return true;
    return w.oomSeenAt !== undefined && performance.now() - w.oomSeenAt < OOM_DEATH_WINDOW_MS;
  }

  /** Why a sandbox died: out of memory (see oomDeath), else killed. */
  private deathReason(row: WorkshopRow, handle: SandboxHandle, oom: boolean): string {
    const now = this.driver.oomKills(handle);
    const resume = `run \`atelier workshops resume ${row.id}\` to start it again (its files are kept)`;
    if (oom)
      return `out of memory: the kernel's OOM killer killed its processes at its ${Math.round(Number(row.memory_bytes) / 2 ** 20)}m memory limit (memory.oom_control oom_kill ${now ?? '?'}); ${resume}, with more --memory if it needs it`;
    return `killed: its init process ended (a process inside killed it, e.g. \`kill -9 -1\`, or it was killed from the host); ${resume}`;
  }

  /** Marks a workshop Dead if its sandbox is gone (under its lock, so a concurrent resume or delete wins). */
  async noticeDeath(id: string, known?: Watched, oom?: boolean): Promise<void> {
    // Found by an exec before the watcher's look: what the watcher knew, read now.
    const seen = known ?? this.watched.get(id);
    const oomNow = oom ?? (seen !== undefined && this.oomDeath(seen));
    try {
      await this.shared.locked(id, async () => {
        const [row] = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]);
        if (!row || row.node_id !== this.opts.nodeId || !row.sandbox) return;
        if (row.status !== 'Running' && row.status !== 'Suspended') return;
        if (this.driver.alive(row.sandbox)) {
          // Started afresh meanwhile: watch the new one.
          if (!this.watched.has(id)) this.watch(id, row.sandbox);
          return;
        }
        const same = seen && seen.handle.pid === row.sandbox.pid && seen.handle.startTime === row.sandbox.startTime;
        await this.markDead(row, this.deathReason(row, row.sandbox, !!same && oomNow));
      });
    } catch (err) {
      this.opts.log.error({ workshop: id, err: String(err) }, 'could not record a dead workshop');
    }
  }

  /** Releases what a dead sandbox held (listeners, simulators, cgroups), then records it Dead with the reason. */
  async markDead(row: WorkshopRow, reason: string): Promise<void> {
    this.watched.delete(row.id);
    this.opts.log.warn({ workshop: row.id, reason }, 'workshop died');
    await this.opts.simulators.stopAll(row.id).catch(() => undefined);
    this.opts.internal.close(row.id);
    await this.opts.egress.proxy.close(row.id).catch(() => undefined);
    // After the reason is read: its cgroups (and their counters) go with the rest.
    await this.driver.stop(row.id, row.sandbox).catch(() => undefined);
    await this.shared.setStatus(row.id, 'Dead', reason, null);
    await this.opts
      .onEnded?.(row.id, `the workshop's sandbox died: ${reason}`)
      .catch((err: unknown) =>
        this.opts.log.warn({ workshop: row.id, err: String(err) }, 'could not end the approvals of a dead workshop'),
      );
  }

  /** Why a sandbox found gone at start is gone: the host restarted since it was last seen, or it died while the server was down. */
  lostReason(row: WorkshopRow): string {
    const resume = `run \`atelier workshops resume ${row.id}\` to start it again (its files are kept)`;
    const boot = hostBootTime();
    if (boot !== undefined && row.updated_at.getTime() < boot.getTime())
      return `host restarted: its processes were gone when the server started (the host booted at ${boot.toISOString()}); ${resume}`;
    return `killed: its processes ended while the server was not running; ${resume}`;
  }
}
