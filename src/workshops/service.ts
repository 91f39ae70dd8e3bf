import { mkdirSync, readFileSync } from 'node:fs';
import { cpus as hostCpus, totalmem } from 'node:os';
import { posix } from 'node:path';
import {
  AtelierError,
  hashToken,
  newApiToken,
  newId,
  newWorkshopId,
  formatSize,
  parseSize,
  type CreateWorkshopRequest,
  type ExecRequest,
  type SimulatorRequest,
  type Workshop,
  type WorkshopLimits,
} from '../core/index.js';
import { queryRows, withTransaction, type Pool } from '../db/index.js';
import { type Principal, type WorkshopAction } from '../identity/index.js';
import { EGRESS_PORT, listenInSandbox, type SandboxHandle } from '../sandbox/index.js';
import { createEgressPolicy, type EgressPolicy, type EgressRecord } from '../egress/index.js';
import { readDevcontainer } from './devcontainer.js';
import { readProjectSettings } from './project.js';
import type { WorkshopDriver } from './driver.js';
import { WorkshopEvents } from './events.js';
import { cloneRepo, resolveRepoSource } from './repo.js';
import { mergeSimulators, precheckSimulators, type SimulatorView, type WorkshopContext } from './simulators.js';
import { BASE_ENV, WorkshopExecs } from './exec.js';
import { WorkshopFiles } from './files.js';
import {
  DEFAULT_ASK_HOLD_SECONDS,
  toWorkshop,
  WorkshopShared,
  type Access,
  type RunningExec,
  type ServiceOptions,
  type WorkshopRow,
} from './shared.js';

export type { EgressWiring, ExecGate, RunningExec, ServiceOptions } from './shared.js';

/** devcontainer lifecycle commands (npm ci, …) are stopped after this long. */
const CREATE_COMMAND_TIMEOUT_SECONDS = 30 * 60;

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

/** Workshops: the product's core noun. Every entry point (CLI, REST, MCP) goes through here. */
export class WorkshopService {
  /** Lifecycle events (`deleting`, `stopped`, `deleted`) for the rooms that hold something per workshop. */
  readonly events: WorkshopEvents;
  private readonly shared: WorkshopShared;
  private readonly execs: WorkshopExecs;
  private readonly files: WorkshopFiles;
  /** Running and suspended sandboxes of this server (only the node that runs a sandbox decides it died). */
  private readonly watched = new Map<string, Watched>();
  private deathTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly pool: Pool,
    /** Where and how the sandboxes run; terminals ask it how to enter one. */
    readonly driver: WorkshopDriver,
    private readonly opts: ServiceOptions,
  ) {
    this.events = new WorkshopEvents(opts.log);
    this.shared = new WorkshopShared(pool, driver, opts, (id) => void this.noticeDeath(id));
    this.execs = new WorkshopExecs(this.shared);
    this.files = new WorkshopFiles(this.execs);
  }

  private limits(req: CreateWorkshopRequest): WorkshopLimits {
    const cores = hostCpus().length;
    const cpus = req.cpus ?? Math.min(this.opts.defaults.cpus, cores);
    if (cpus > cores) throw new AtelierError('INVALID_ARGUMENT', `cpus ${cpus} is more than this host has (${cores})`, { field: 'cpus' });
    const memText = req.memory ?? this.opts.defaults.memory;
    const memoryBytes = parseSize(memText);
    if (memoryBytes === undefined)
      throw new AtelierError('INVALID_ARGUMENT', `memory "${memText}" is not a size: use for example 512m or 4g`, { field: 'memory' });
    if (memoryBytes < 32 << 20)
      throw new AtelierError('INVALID_ARGUMENT', `memory ${memText} is below the 32m minimum`, { field: 'memory' });
    const host = totalmem();
    if (memoryBytes > host)
      throw new AtelierError('INVALID_ARGUMENT', `memory ${memText} is more than this host has (${Math.floor(host / 2 ** 20)}m)`, {
        field: 'memory',
      });
    return { cpus, memoryBytes, pids: req.pids ?? this.opts.defaults.pids };
  }

  /** The quota asked for (`disk`), checked against the server's maximum; null for the server's default. */
  private diskBytes(req: CreateWorkshopRequest): number | null {
    if (req.disk === undefined) return null;
    // Never a quota that is not there: say so rather than take --disk and write without a limit.
    if (this.driver.diskNote)
      throw new AtelierError('UNSUPPORTED', `disk quotas are ${this.driver.diskNote}: leave out disk (--disk)`, { field: 'disk' });
    const bytes = parseSize(req.disk);
    if (bytes === undefined)
      throw new AtelierError('INVALID_ARGUMENT', `disk "${req.disk}" is not a size: use for example 512m or 20g`, { field: 'disk' });
    if (bytes < 64 << 20) throw new AtelierError('INVALID_ARGUMENT', `disk ${req.disk} is below the 64m minimum`, { field: 'disk' });
    const max = this.opts.disk?.maxBytes;
    if (max !== undefined && bytes > max)
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `disk ${req.disk} is more than this server allows (${formatSize(max)}, its ATELIER_MAX_DISK): ask for at most that`,
        { field: 'disk', maxBytes: max },
      );
    return bytes;
  }

  private startSandbox(row: WorkshopRow): Promise<SandboxHandle> {
    return this.driver.start({
      id: row.id,
      uid: row.uid,
      hostname: row.name,
      limits: { cpus: row.cpus, memoryBytes: Number(row.memory_bytes), pids: row.pids },
    });
  }

  /** Starts a workshop's sandbox afresh (its files are kept) after its processes were lost. */
  private async restartSandbox(row: WorkshopRow, reason: string): Promise<WorkshopRow> {
    await this.driver.stop(row.id, row.sandbox);
    const handle = await this.startSandbox(row);
    try {
      await this.openEgress(row, handle);
      // A new sandbox is a new network namespace: the internal listeners are opened again.
      this.opts.internal.close(row.id);
      await this.opts.simulators.recover(this.shared.context(row, handle));
    } catch (err) {
      await this.driver.stop(row.id, handle).catch(() => undefined);
      throw err;
    }
    const started = await this.shared.setStatus(row.id, 'Running', reason, handle);
    this.watch(row.id, handle);
    return started;
  }

  // --- Death: a sandbox whose init ended is Dead, with the reason, until it is resumed ----------

  private watch(id: string, handle: SandboxHandle): void {
    this.watched.set(id, { handle, oomKills: this.driver.oomKills(handle), oomSeenAt: undefined });
  }

  /**
   * Every second (DEATH_CHECK_MS): one /proc read per sandbox of this server, and its OOM counter;
   * the database is touched only for one that died. The timer never keeps the process alive.
   */
  private startDeathWatch(): void {
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
  private async noticeDeath(id: string, known?: Watched, oom?: boolean): Promise<void> {
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
  private async markDead(row: WorkshopRow, reason: string): Promise<void> {
    this.watched.delete(row.id);
    this.opts.log.warn({ workshop: row.id, reason }, 'workshop died');
    await this.opts.simulators.stopAll(row.id).catch(() => undefined);
    this.opts.internal.close(row.id);
    await this.opts.egress.proxy.close(row.id).catch(() => undefined);
    // After the reason is read: its cgroups (and their counters) go with the rest.
    await this.driver.stop(row.id, row.sandbox).catch(() => undefined);
    await this.shared.setStatus(row.id, 'Dead', reason, null);
    await this.opts
      .onDied?.(row.id, reason)
      .catch((err: unknown) =>
        this.opts.log.warn({ workshop: row.id, err: String(err) }, 'could not end the approvals of a dead workshop'),
      );
  }

  /** The workshop's live policy: the platform's allowlist, then the project's entries. */
  private egressPolicy(row: WorkshopRow): EgressPolicy {
    const e = this.opts.egress;
    return createEgressPolicy({
      allow: [...e.defaults, ...(row.egress.allow ?? []), ...(row.egress.approved ?? [])],
      deny: row.egress.deny ?? [],
      allowRanges: e.allowRanges,
      askHoldSeconds: row.egress.askHoldSeconds ?? DEFAULT_ASK_HOLD_SECONDS,
    });
  }

  /**
   * Opens (or reopens, after a server restart) the workshop's way out: the proxy's listener on
   * 127.0.0.1:3128 inside the sandbox's own network namespace, with the workshop's policy.
   */
  private async openEgress(row: WorkshopRow, handle: SandboxHandle, policy: EgressPolicy | null = this.egressPolicy(row)): Promise<void> {
    // A listener left from earlier in this process (a sandbox restarted on resume) is replaced.
    await this.opts.egress.proxy.close(row.id);
    const server = await listenInSandbox(handle, EGRESS_PORT);
    try {
      await this.opts.egress.proxy.listen(row.id, server, policy ?? undefined);
    } catch (err) {
      server.close();
      throw err;
    }
  }

  /** True when the workshop runs on this server (its proxy and sandbox are here). */
  async isLocal(id: string): Promise<boolean> {
    const [r] = await queryRows<{ node_id: string }>(this.pool, 'SELECT node_id FROM workshops WHERE id = $1', [id]);
    return r?.node_id === this.opts.nodeId;
  }

  /** A workshop's live sandbox when it runs on this server (server-side effects such as granted secrets). */
  async localSandbox(id: string): Promise<{ handle: SandboxHandle; run: string } | undefined> {
    const [row] = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]);
    if (!row || row.node_id !== this.opts.nodeId || row.status !== 'Running' || !row.sandbox || !this.driver.alive(row.sandbox))
      return undefined;
    return { handle: row.sandbox, run: this.driver.layout(id).run };
  }

  /**
   * Adds an approved egress entry to the workshop's policy: stored with the workshop (once,
   * whatever the number of calls) and applied to its live proxy at once.
   */
  async addApprovedEgress(id: string, entry: string): Promise<void> {
    await queryRows(
      this.pool,
      `UPDATE workshops SET egress = jsonb_set(egress, '{approved}', coalesce(egress->'approved', '[]'::jsonb) || to_jsonb($2::text))
        WHERE id = $1 AND NOT coalesce(egress->'approved', '[]'::jsonb) ? $2`,
      [id, entry],
    );
    const [row] = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]);
    if (row && row.node_id === this.opts.nodeId && this.opts.egress.proxy.getPolicy(id))
      this.opts.egress.proxy.setPolicy(id, this.egressPolicy(row));
  }

  /** What the workshop's proxy decided, oldest first (see EgressJournal.list). */
  async egressLog(id: string, actor: Principal, opts: { afterId?: number; limit?: number }): Promise<EgressRecord[]> {
    await this.shared.row(id, { actor, action: 'read' });
    return this.opts.egress.journal.list(id, opts);
  }

  /** Clones the repository and starts the sandbox; returns when the workshop is Running or Failed. */
  async create(req: CreateWorkshopRequest, actor: Principal): Promise<Workshop> {
    const source = resolveRepoSource(req.repo, this.opts.allowRepoRoots);
    const limits = this.limits(req);
    this.driver.admitDisk(this.diskBytes(req));
    if (req.simulators) precheckSimulators(req.simulators);
    const id = newWorkshopId();
    const baseName =
      (posix.basename(source.display.replace(/\.git$/, '').replace(/[/:]+$/, '')) || 'workshop')
        .toLowerCase()
        .replace(/[^a-z0-9-]+/g, '-')
        .replace(/^-+|-+$/g, '')
        .slice(0, 40) || 'workshop';
    const name = req.name ?? `${baseName}-${id.slice(3, 7)}`;
    let row: WorkshopRow;
    try {
      row = await withTransaction(this.pool, async (c) => {
        const uid = this.opts.uidBase + Number((await c.query<{ n: string }>("SELECT nextval('workshop_uid_seq') AS n")).rows[0]!.n);
        const r = await c.query<WorkshopRow>(
          `INSERT INTO workshops (id, name, owner_id, tenant_id, node_id, status, repo, uid, cpus, memory_bytes, pids, budget_usd)
           VALUES ($1, $2, $3, $11, $4, 'Building', $5, $6, $7, $8, $9, $10) RETURNING *`,
          [
            id,
            name,
            actor.userId,
            this.opts.nodeId,
            source.display,
            uid,
            limits.cpus,
            limits.memoryBytes,
            limits.pids,
            req.budgetUsd ?? null,
            actor.tenantId,
          ],
        );
        // The workshop's own agent token (ATELIER_TOKEN inside it): its owner's rights capped at
        // member, for this workshop only (an agent principal), gone with the workshop.
        const token = newApiToken();
        await c.query(
          `INSERT INTO api_tokens (id, user_id, name, token_hash, tenant_id, role, workshop_id)
           VALUES ($1, $2, $3, $4, $5, 'member', $6)`,
          [newId('tok'), actor.userId, `workshop ${id}`, hashToken(token), actor.tenantId, id],
        );
        const sealed = this.opts.sealer.encrypt(token, `workshop-token:${id}`);
        await c.query('UPDATE workshops SET agent_token = $2 WHERE id = $1', [id, sealed]);
        return { ...r.rows[0]!, agent_token: sealed };
      });
    } catch (err) {
      if ((err as { code?: string }).code === '23505')
        throw new AtelierError('ALREADY_EXISTS', `a workshop named "${name}" already exists: pick another --name`, { field: 'name' });
      throw err;
    }
    return this.shared.locked(id, () => this.build(row, source, req));
  }

  private async build(row: WorkshopRow, source: ReturnType<typeof resolveRepoSource>, req: CreateWorkshopRequest): Promise<Workshop> {
    const id = row.id;
    let handle: SandboxHandle | null = null;
    try {
      const layout = await this.driver.prepareRoot(id, this.diskBytes(req));
      // The sandbox (bound to the workspace directory, not its contents) and its egress listener
      // start while the repository is cloned: neither needs the files. Until the project's policy
      // is read, the listener has none (every request is refused); nothing runs inside yet anyway.
      mkdirSync(layout.workspace, { mode: 0o700 });
      const started = this.startSandbox(row).then(async (h) => {
        handle = h;
        await this.openEgress(row, h, null);
        return h;
      });
      const [sandbox, clone] = await Promise.allSettled([started, cloneRepo(source, layout.workspace)]);
      if (clone.status === 'rejected') throw clone.reason;
      if (sandbox.status === 'rejected') throw sandbox.reason;
      const dev = readDevcontainer(layout.workspace, req.devcontainer, BASE_ENV);
      const project = readProjectSettings(layout.workspace);
      row.egress = project.egress;
      this.opts.egress.proxy.setPolicy(id, this.egressPolicy(row));
      await this.driver.adoptWorkspace(id, row.uid);
      const env: Record<string, string> = { ...dev.env };
      if (req.budgetUsd !== undefined) env.ATELIER_MAX_BUDGET_USD = String(req.budgetUsd);
      await queryRows(
        this.pool,
        'UPDATE workshops SET env = $2, forward_ports = $3, warnings = $4, egress = $5, approval_commands = $6 WHERE id = $1',
        [
          id,
          JSON.stringify(env),
          dev.forwardPorts,
          JSON.stringify(dev.warnings),
          JSON.stringify(project.egress),
          JSON.stringify(project.approvalCommands),
        ],
      );
      await queryRows(this.pool, 'UPDATE workshops SET sandbox = $2 WHERE id = $1', [id, JSON.stringify(handle)]);
      const current = { ...row, env, sandbox: handle! };
      // Simulators start before the devcontainer's commands, which may well migrate a database.
      // One that fails is reported Failed in `atelier simulators list`; the workshop goes on.
      await this.opts.simulators.start(this.shared.context(row, handle!), mergeSimulators(project.simulators, req.simulators ?? []));
      for (const step of dev.createCommands) {
        const result = await this.execs.collectOutput(
          this.execs.spawn(current, step.command, '/workspace', {}, undefined, CREATE_COMMAND_TIMEOUT_SECONDS),
          {
            maxBytes: 64 << 10,
            overflow: 'keep-tail',
          },
        );
        if (result.exitCode !== 0) {
          const tail = (result.stderr.toString('utf8') || result.stdout.toString('utf8')).trim().split('\n').slice(-5).join('\n');
          throw new AtelierError(
            'SANDBOX_FAILED',
            `devcontainer ${step.key} exited with code ${result.exitCode}${tail ? `: ${tail}` : ''}`,
          );
        }
      }
      const built = await this.shared.setStatus(id, 'Running', null);
      this.watch(id, handle!);
      return toWorkshop(built);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      this.opts.log.warn({ workshop: id, err: reason }, 'workshop build failed');
      await this.opts.simulators.removeAll(id).catch(() => undefined);
      await this.driver.stop(id, handle).catch(() => undefined);
      await this.opts.egress.proxy.close(id).catch(() => undefined);
      // The workshop stays, Failed with the reason, until the user deletes it.
      const failed = await this.shared.setStatus(id, 'Failed', reason, null).catch(() => null);
      if (failed) return toWorkshop(failed);
      throw err;
    }
  }

  /** The caller's tenant's workshops on this server (an agent token: its own workshop only). */
  async list(actor: Principal): Promise<Workshop[]> {
    return (
      await queryRows<WorkshopRow>(
        this.pool,
        'SELECT * FROM workshops WHERE node_id = $1 AND tenant_id = $2 AND ($3::text IS NULL OR id = $3) ORDER BY created_at',
        [this.opts.nodeId, actor.tenantId, actor.kind === 'agent' ? actor.workshopId : null],
      )
    ).map((r) => ({ ...toWorkshop(r), disk: this.driver.diskOf(r.id) }));
  }

  async get(id: string, actor: Principal): Promise<Workshop> {
    const row = await this.shared.row(id, { actor, action: 'read' });
    return { ...toWorkshop(row), disk: this.driver.diskOf(row.id) };
  }

  /** Checks that `actor` may do `action` on the workshop (for routes that act on it indirectly). */
  async authorize(id: string, actor: Principal, action: WorkshopAction): Promise<void> {
    await this.shared.row(id, { actor, action });
  }

  /**
   * The running sandbox of a workshop and its environment, for terminals and tunnels (the
   * `operate` right). With `resume`, a suspended workshop is resumed first (`resumed` says so).
   */
  async sandboxFor(
    id: string,
    actor: Principal,
    opts: { resume: boolean },
  ): Promise<{ id: string; name: string; sandbox: SandboxHandle; env: Record<string, string>; resumed: boolean }> {
    const access: Access = { actor, action: 'operate' };
    const first = await this.shared.row(id, access);
    let resumed = false;
    if (first.status === 'Suspended' && opts.resume) {
      await this.resume(id, actor);
      resumed = true;
    }
    // One lookup per tunnel connection unless the workshop was just resumed.
    const row = await this.shared.runnable(id, access, resumed ? undefined : first);
    return { id: row.id, name: row.name, sandbox: row.sandbox, env: this.execs.sandboxEnv(row), resumed };
  }

  /** Freezes every process of the workshop (cgroup freezer); memory and files stay as they are. */
  async stop(id: string, actor: Principal): Promise<Workshop> {
    let stopped = false;
    const w = await this.shared.locked(id, async () => {
      const row = await this.shared.row(id, { actor, action: 'operate' });
      if (row.status === 'Suspended') return toWorkshop(row);
      if (row.status !== 'Running' || !row.sandbox)
        throw new AtelierError('WORKSHOP_NOT_RUNNING', `workshop ${id} is ${row.status} and cannot be suspended`, {
          id,
          status: row.status,
        });
      if (!this.driver.canSuspend())
        throw new AtelierError(
          'UNSUPPORTED',
          'suspend needs the cgroup freezer, which this server does not have: run the server as root (its start-up lines list what is missing)',
        );
      await this.execs.waitExecsEntered(row);
      await this.driver.suspend(row.sandbox);
      stopped = true;
      return toWorkshop(await this.shared.setStatus(id, 'Suspended', null));
    });
    if (stopped) await this.events.emit({ type: 'stopped', id: w.id });
    return w;
  }

  /** Thaws a suspended workshop, or starts its sandbox again if its processes were lost. */
  async resume(id: string, actor: Principal): Promise<Workshop> {
    return this.shared.locked(id, async () => {
      const row = await this.shared.row(id, { actor, action: 'operate' });
      if (row.status === 'Running') return toWorkshop(row);
      if (row.status === 'Dead') {
        this.opts.log.info({ workshop: id, was: row.status_reason }, 'starting a dead workshop again');
        return toWorkshop(
          await this.restartSandbox(row, `started again, files kept; it had died: ${row.status_reason ?? 'no reason recorded'}`),
        );
      }
      if (row.status !== 'Suspended')
        throw new AtelierError(
          'WORKSHOP_NOT_RUNNING',
          `workshop ${id} is ${row.status} and cannot be resumed${row.status === 'Failed' ? ': delete it and create it again' : ''}`,
          { id, status: row.status },
        );
      if (row.sandbox && this.driver.alive(row.sandbox)) {
        await this.driver.resume(row.sandbox);
        return toWorkshop(await this.shared.setStatus(id, 'Running', null));
      }
      return toWorkshop(
        await this.restartSandbox(row, 'its processes had stopped while suspended (host restart?): started afresh, files kept'),
      );
    });
  }

  /** Kills the sandbox and removes every file, cgroup and row the workshop owned. */
  async delete(id: string, actor: Principal): Promise<void> {
    const found = await this.shared.row(id, { actor, action: 'delete' });
    // Before anything is torn down: live connections into the sandbox are cut with the reason.
    await this.events.emit({ type: 'deleting', id: found.id });
    // Commands still running there would hold the lock and die with the sandbox anyway.
    await this.execs.killExecs(id);
    await this.shared.locked(id, async () => {
      const row = await this.shared.row(id);
      this.watched.delete(id);
      await this.shared.setStatus(id, 'Deleting', null);
      await this.opts.simulators.removeAll(id);
      await this.opts.egress.proxy.close(id);
      await this.driver.destroy(id, row.sandbox).catch((err: Error) => {
        throw new AtelierError('SANDBOX_FAILED', `workshop ${id} could not be removed completely (${err.message}); run the delete again`, {
          id,
        });
      });
      await queryRows(this.pool, 'DELETE FROM workshops WHERE id = $1', [id]);
    });
    await this.events.emit({ type: 'deleted', id: found.id });
  }

  /** The workshop's simulators, their state, endpoint and resource use. */
  async listSimulators(id: string, actor: Principal): Promise<SimulatorView[]> {
    await this.shared.row(id, { actor, action: 'read' });
    // Credentials (postgres password…) only for those who may operate it; viewers get them redacted.
    const credentials = await this.authorize(id, actor, 'operate').then(
      () => true,
      () => false,
    );
    return this.opts.simulators.list(id, { credentials });
  }

  /** Starts one more simulator in a running workshop, reachable at once without a restart. */
  async requestSimulator(id: string, req: SimulatorRequest, actor: Principal): Promise<SimulatorView> {
    return this.shared.locked(id, async () => {
      const row = await this.shared.runnable(id, { actor, action: 'operate' });
      const [view] = await this.opts.simulators.start(this.shared.context(row, row.sandbox), [req], true);
      return view!;
    });
  }

  async simulatorLogs(id: string, name: string, actor: Principal, tailBytes?: number): Promise<string> {
    await this.shared.row(id, { actor, action: 'read' });
    return this.opts.simulators.logs(id, name, tailBytes);
  }

  async resetSimulator(id: string, name: string, actor: Principal): Promise<SimulatorView> {
    return this.shared.locked(id, async () => {
      const row = await this.shared.runnable(id, { actor, action: 'operate' });
      return this.opts.simulators.reset(this.shared.context(row, row.sandbox), name);
    });
  }

  /** Running workshops (for the simulators' watchdog). */
  private async runningContexts(): Promise<WorkshopContext[]> {
    const rows = await queryRows<WorkshopRow>(
      this.pool,
      "SELECT * FROM workshops WHERE node_id = $1 AND status = 'Running' AND sandbox IS NOT NULL",
      [this.opts.nodeId],
    );
    return rows.map((r) => this.shared.context(r, r.sandbox!));
  }

  /** Kills the commands this server process started and still waits for (at shutdown). */
  async close(): Promise<void> {
    if (this.deathTimer) clearInterval(this.deathTimer);
    this.deathTimer = undefined;
    this.watched.clear();
    this.opts.simulators.stopWatchdog();
    this.opts.internal.closeAll();
    await this.execs.killExecs();
    this.driver.releaseCgroupBase();
  }

  /**
   * Starts a command in a running workshop; output streams as it is produced. A command the
   * project's `approvals.commands` names waits for a human's approval first (`gate`).
   */
  exec(
    id: string,
    req: ExecRequest,
    actor: Principal,
    gate: { onApproval?: (approvalId: string) => void; signal?: AbortSignal } = {},
  ): Promise<RunningExec> {
    return this.execs.exec(id, req, actor, gate);
  }

  /**
   * Collects a command's output up to `maxBytes`. Past it: `kill` stops the command, `drop`
   * keeps the beginning and lets the command finish, `keep-tail` keeps the end (build logs).
   */
  collectOutput(
    started: RunningExec | Promise<RunningExec>,
    opts: { maxBytes: number; overflow?: 'kill' | 'drop' | 'keep-tail' },
  ): Promise<{ exitCode: number; signal: string | null; stdout: Buffer; stderr: Buffer; truncated: boolean }> {
    return this.execs.collectOutput(started, opts);
  }

  /** Reads a file of the workspace (at most 16 MiB). */
  readFile(id: string, path: string, actor: Principal): Promise<Buffer> {
    return this.files.readFile(id, path, actor);
  }

  /** Writes a file of the workspace atomically (temporary file, then rename). */
  writeFile(id: string, path: string, content: Buffer, actor: Principal): Promise<{ path: string; bytes: number }> {
    return this.files.writeFile(id, path, content, actor);
  }

  /** The workspace's changes against HEAD, and the untracked files. */
  gitDiff(id: string, actor: Principal): Promise<{ diff: string; untracked: string[]; truncated: boolean }> {
    return this.files.gitDiff(id, actor);
  }

  /**
   * A command of the server's own in a running workshop (as its user, in its sandbox, in
   * /workspace), output collected: the platform acting on an approved request, no caller's rights.
   */
  async runAsPlatform(id: string, command: string[], env: Record<string, string>, maxBytes: number) {
    return this.execs.collectOutput(this.execs.startLocked(id, undefined, command, '/workspace', env), { maxBytes });
  }

  /** Where a workshop's branch may be pushed: `remote`, else the repository it was cloned from; checked like a repo source. */
  async pushTarget(id: string, remote: string | undefined): Promise<string> {
    const row = await this.shared.row(id);
    const source = resolveRepoSource(remote ?? row.repo, this.opts.allowRepoRoots);
    return source.kind === 'remote' ? source.url : source.path;
  }

  /** Why a sandbox found gone at start is gone: the host restarted since it was last seen, or it died while the server was down. */
  private lostReason(row: WorkshopRow): string {
    const resume = `run \`atelier workshops resume ${row.id}\` to start it again (its files are kept)`;
    const boot = hostBootTime();
    if (boot !== undefined && row.updated_at.getTime() < boot.getTime())
      return `host restarted: its processes were gone when the server started (the host booted at ${boot.toISOString()}); ${resume}`;
    return `killed: its processes ended while the server was not running; ${resume}`;
  }

  /** One workshop of reconcile(): never throws (a workshop that cannot be recovered ends Failed). */
  private async reconcileOne(row: WorkshopRow): Promise<void> {
    const id = row.id;
    try {
      if (row.status === 'Building') {
        await this.driver.stop(id, row.sandbox);
        await this.shared.setStatus(
          id,
          'Failed',
          'the server stopped while this workshop was being created: delete it and create it again',
          null,
        );
      } else if (row.status === 'Deleting') {
        await this.driver.destroy(id, row.sandbox);
        await queryRows(this.pool, 'DELETE FROM workshops WHERE id = $1', [id]);
      } else if (row.status === 'Running' || row.status === 'Suspended') {
        const alive = row.sandbox !== null && this.driver.alive(row.sandbox);
        if (alive) {
          this.watch(id, row.sandbox!);
          await this.openEgress(row, row.sandbox!);
          await this.opts.simulators.recover(this.shared.context(row, row.sandbox!));
          const orphans = this.driver.killOrphanExecs(row.sandbox!);
          if (orphans > 0) this.opts.log.warn({ workshop: id, orphans }, 'killed commands left running by a previous server process');
          const frozen = this.driver.frozen(row.sandbox!);
          if (frozen && row.status === 'Running') await this.shared.setStatus(id, 'Suspended', null);
          if (!frozen && row.status === 'Suspended') await this.shared.setStatus(id, 'Running', null);
        } else {
          await this.markDead(row, this.lostReason(row));
        }
      } else if (row.status === 'Dead' && row.sandbox) {
        await this.driver.stop(id, row.sandbox);
        await this.shared.setStatus(id, 'Dead', row.status_reason, null);
      } else if (row.status === 'Failed' && row.sandbox) {
        await this.driver.stop(id, row.sandbox);
        await this.shared.setStatus(id, 'Failed', row.status_reason, null);
      }
    } catch (err) {
      this.opts.log.error({ workshop: id, err: String(err) }, 'reconcile failed for a workshop');
      // Failed without a handle: its processes must not be left running untracked.
      const current = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]).catch(() => []);
      await this.driver.stop(id, current[0]?.sandbox ?? row.sandbox).catch(() => undefined);
      await this.opts.egress.proxy.close(id).catch(() => undefined);
      await this.shared
        .setStatus(id, 'Failed', `could not be recovered after a restart: ${err instanceof Error ? err.message : String(err)}`, null)
        .catch(() => undefined);
    }
  }

  /**
   * Brings the database and this host into agreement after a start (also after `kill -9`):
   * half-built workshops fail cleanly, half-deleted ones finish, lost sandboxes restart, and
   * directories or cgroups that no row claims are removed.
   */
  async reconcile(): Promise<void> {
    const rows = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE node_id = $1', [this.opts.nodeId]);
    // Workshops are independent: several at once (each reopens listeners in its namespace, ~40 ms).
    const queue = [...rows];
    const worker = async (): Promise<void> => {
      for (let row = queue.shift(); row; row = queue.shift()) await this.reconcileOne(row);
    };
    await Promise.all(Array.from({ length: Math.min(8, queue.length) }, worker));
    this.opts.simulators.startWatchdog(() => this.runningContexts());
    this.startDeathWatch();
    const known = new Set((await queryRows<{ id: string }>(this.pool, 'SELECT id FROM workshops')).map((r) => r.id));
    for (const id of this.driver.localIds()) {
      if (known.has(id)) continue;
      this.opts.log.warn({ workshop: id }, 'removing an orphan workshop directory or cgroup');
      await this.opts.simulators.removeAll(id).catch(() => undefined);
      await this.driver
        .destroy(id, null)
        .catch((err: Error) => this.opts.log.error({ workshop: id, err: err.message }, 'could not remove an orphan workshop'));
    }
  }
}
