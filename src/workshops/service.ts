import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { constants as osConstants, cpus as hostCpus, totalmem } from 'node:os';
import { posix } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { type Readable } from 'node:stream';
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
import { findPgBinDir, queryRows, withTransaction, type Pool } from '../db/index.js';
import { type Principal, type WorkshopAction } from '../identity/index.js';
import { EGRESS_PORT, listenInSandbox, type SandboxHandle } from '../sandbox/index.js';
import { createEgressPolicy, type EgressPolicy, type EgressRecord } from '../egress/index.js';
import { readDevcontainer } from './devcontainer.js';
import { readProjectSettings } from './project.js';
import type { WorkshopDriver } from './driver.js';
import { WorkshopEvents } from './events.js';
import { cloneRepo, resolveRepoSource } from './repo.js';
import { mergeSimulators, precheckSimulators, type SimulatorView, type WorkshopContext } from './simulators.js';
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

const MAX_FILE_BYTES = 16 << 20;
/** devcontainer lifecycle commands (npm ci, …) are stopped after this long. */
const CREATE_COMMAND_TIMEOUT_SECONDS = 30 * 60;

/** Every workshop process starts from this environment (then devcontainer.json, then the request). */
const PROXY_URL = `http://127.0.0.1:${EGRESS_PORT}`;

/**
 * The installed PostgreSQL's own bin directory (Debian: /usr/lib/postgresql/N/bin), first on a
 * workshop's PATH: Debian's /usr/bin/psql is a Perl wrapper that picks a cluster, which costs
 * ~50 ms per call here, and a workshop has no local cluster to pick (its databases are
 * simulators reached by URL). The directory holds the same version's client and server tools.
 */
function postgresBin(): string | undefined {
  try {
    const dir = findPgBinDir(undefined);
    return existsSync(`${dir}/psql`) ? dir : undefined;
  } catch {
    return undefined;
  }
}

const PG_BIN = postgresBin();

const BASE_ENV: Record<string, string> = {
  PATH: `${PG_BIN ? `${PG_BIN}:` : ''}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
  HOME: '/home/atelier',
  USER: 'atelier',
  LOGNAME: 'atelier',
  SHELL: '/bin/bash',
  LANG: 'C.UTF-8',
  // The only way out is the egress proxy (see sandbox/launcher.ts); every tool that reads the
  // usual variables (curl, git, npm, pip, Go, Node's undici with a dispatcher…) goes through it.
  HTTP_PROXY: PROXY_URL,
  HTTPS_PROXY: PROXY_URL,
  ALL_PROXY: `socks5h://127.0.0.1:${EGRESS_PORT}`,
  http_proxy: PROXY_URL,
  https_proxy: PROXY_URL,
  all_proxy: `socks5h://127.0.0.1:${EGRESS_PORT}`,
  NO_PROXY: 'localhost,127.0.0.1,::1,.atelier.internal',
  no_proxy: 'localhost,127.0.0.1,::1,.atelier.internal',
};

/** When the host booted (btime of /proc/stat), undefined if unreadable. */
function hostBootTime(): Date | undefined {
  try {
    const m = /^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'));
    return m ? new Date(Number(m[1]) * 1000) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Resolves when `stream` ends, or once it has been idle (no data, not paused by a slow reader)
 * for 100 ms, which means a background process holds the pipe: it is then closed on our side.
 */
function drainAfterExit(stream: Readable): Promise<void> {
  return new Promise((resolve) => {
    if (stream.readableEnded || stream.destroyed) return resolve();
    let active = true;
    const onData = (): void => {
      active = true;
    };
    const timer = setInterval(() => {
      if (active || stream.isPaused()) {
        active = false;
        return;
      }
      stream.destroy();
      done();
    }, 100);
    const done = (): void => {
      clearInterval(timer);
      stream.off('data', onData);
      resolve();
    };
    stream.on('data', onData);
    stream.once('end', done);
    stream.once('close', done);
  });
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
        const result = await this.collectOutput(
          this.spawn(current, step.command, '/workspace', {}, undefined, CREATE_COMMAND_TIMEOUT_SECONDS),
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
    return { id: row.id, name: row.name, sandbox: row.sandbox, env: this.sandboxEnv(row), resumed };
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
      await this.waitExecsEntered(row);
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
    await this.killExecs(id);
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

  private sandboxEnv(row: WorkshopRow, extra: Record<string, string> = {}): Record<string, string> {
    return {
      ...BASE_ENV,
      ATELIER_WORKSHOP_ID: row.id,
      ATELIER_WORKSHOP_NAME: row.name,
      ...this.agentEnv(row),
      ...row.env,
      // The simulators' connection details win over the devcontainer's (which name compose services).
      ...this.opts.simulators.env(row.id),
      ...extra,
    };
  }

  /** ATELIER_URL, ATELIER_TOKEN and ATELIER_MCP_URL: the API and MCP endpoint from inside, as this workshop's agent. */
  private agentEnv(row: WorkshopRow): Record<string, string> {
    if (!row.agent_token) return {};
    try {
      return {
        ATELIER_URL: 'http://api.atelier.internal',
        // The workshop's MCP endpoint (no token needed from inside: the server knows the workshop by its socket).
        ATELIER_MCP_URL: 'http://mcp.atelier.internal/mcp',
        ATELIER_TOKEN: this.opts.sealer.decrypt(row.agent_token, `workshop-token:${row.id}`).toString('utf8'),
      };
    } catch (err) {
      this.opts.log.warn({ workshop: row.id, err: (err as Error).message }, 'workshop token cannot be unsealed: ATELIER_TOKEN not set');
      return {};
    }
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

  private spawn(
    row: WorkshopRow & { sandbox: SandboxHandle },
    command: string[],
    cwd: string,
    env: Record<string, string>,
    stdin: Buffer | undefined,
    timeoutSeconds?: number,
  ): RunningExec {
    let child: ChildProcess;
    try {
      child = this.driver.exec(row.sandbox, { command, cwd, env: this.sandboxEnv(row, env) });
    } catch (err) {
      // spawn refuses some arguments synchronously (E2BIG, NUL bytes): that is bad input.
      throw new AtelierError('INVALID_ARGUMENT', `the command could not be started: ${(err as Error).message}`, { field: 'command' });
    }
    if (!child.stdin || !child.stdout || !child.stderr) {
      // Out of file descriptors (EMFILE): Node made no pipes; the 'error' event follows.
      child.on('error', () => undefined);
      throw new AtelierError('UNAVAILABLE', 'the server could not start the command (out of file descriptors?); try again');
    }
    let settled = false;
    const kill = (): void => {
      // Once settled, the group id may belong to someone else: never signal it again.
      if (settled) return;
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // group already gone
      }
    };
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(stdin);
    let timedOut = false;
    const timer = timeoutSeconds
      ? setTimeout(() => {
          timedOut = true;
          kill();
        }, timeoutSeconds * 1000)
      : undefined;
    const done = new Promise<{ exitCode: number; signal: string | null }>((resolve, reject) => {
      child.on('error', (err) => reject(new AtelierError('SANDBOX_FAILED', `could not enter the workshop: ${err.message}`)));
      child.on('exit', (code, signal) => {
        if (timer) clearTimeout(timer);
        // A command killed by a signal exits 128+n, as in a shell; a timeout is 124, as with timeout(1).
        const result = {
          exitCode: timedOut ? 124 : (code ?? 128 + (signal ? (osConstants.signals[signal] ?? 9) : 0)),
          signal: timedOut ? 'SIGKILL' : signal,
        };
        // The command has exited; a process it left in the background may still hold its output
        // pipes open. Read what is there, then stop waiting for them, in any case within 2 s.
        const hard = setTimeout(() => {
          kill();
          child.stdout!.destroy();
          child.stderr!.destroy();
        }, 2000);
        void Promise.all([drainAfterExit(child.stdout!), drainAfterExit(child.stderr!)]).then(() => {
          clearTimeout(hard);
          settled = true;
          resolve(result);
        });
      });
    });
    const exec: RunningExec = { pid: child.pid ?? 0, stdout: child.stdout!, stderr: child.stderr!, done, kill };
    const set = this.shared.running.get(row.id) ?? new Set<RunningExec>();
    set.add(exec);
    this.shared.running.set(row.id, set);
    void done
      .finally(() => {
        set.delete(exec);
        if (set.size === 0) this.shared.running.delete(row.id);
      })
      .catch(() => undefined);
    return exec;
  }

  /** Kills the commands running in one workshop (or all), waiting at most a few seconds. */
  private async killExecs(id?: string): Promise<void> {
    const pending = id === undefined ? [...this.shared.running.values()].flatMap((s) => [...s]) : [...(this.shared.running.get(id) ?? [])];
    for (const exec of pending) exec.kill();
    // A command in a frozen (suspended) workshop dies only once thawed: do not wait for it forever.
    await Promise.race([Promise.allSettled(pending.map((e) => e.done)), new Promise((r) => setTimeout(r, 3000).unref())]);
  }

  /** Kills the commands this server process started and still waits for (at shutdown). */
  async close(): Promise<void> {
    if (this.deathTimer) clearInterval(this.deathTimer);
    this.deathTimer = undefined;
    this.watched.clear();
    this.opts.simulators.stopWatchdog();
    this.opts.internal.closeAll();
    await this.killExecs();
    this.driver.releaseCgroupBase();
  }

  private resolveCwd(cwd: string | undefined): string {
    const p = posix.normalize(posix.join('/workspace', cwd ?? '.'));
    return cwd !== undefined && posix.isAbsolute(cwd) ? posix.normalize(cwd) : p;
  }

  /**
   * Starts a command in a running workshop; output streams as it is produced. A command the
   * project's `approvals.commands` names waits for a human's approval first (`gate`).
   */
  async exec(
    id: string,
    req: ExecRequest,
    actor: Principal,
    gate: { onApproval?: (approvalId: string) => void; signal?: AbortSignal } = {},
  ): Promise<RunningExec> {
    if (this.opts.execGate) {
      const row = await this.shared.row(id, { actor, action: 'operate' });
      if (row.approval_commands.length > 0) await this.opts.execGate(id, row.approval_commands, req, actor, gate);
    }
    const stdin = req.stdin === undefined ? undefined : Buffer.from(req.stdin, 'base64');
    const secrets = this.opts.secretEnv ? await this.opts.secretEnv(id) : {};
    return this.startLocked(
      id,
      { actor, action: 'operate' },
      req.command,
      this.resolveCwd(req.cwd),
      { ...secrets, ...(req.env ?? {}) },
      stdin,
      req.timeoutSeconds,
    );
  }

  /**
   * Checks the workshop and starts the command under its lock: a concurrent `stop` then either
   * comes first (the exec is refused) or waits until the command has joined the cgroups.
   */
  private startLocked(
    id: string,
    access: Access | undefined,
    command: string[],
    cwd: string,
    env: Record<string, string>,
    stdin?: Buffer,
    timeoutSeconds?: number,
  ): Promise<RunningExec> {
    return this.shared.locked(id, async () => this.spawn(await this.shared.runnable(id, access), command, cwd, env, stdin, timeoutSeconds));
  }

  /** Before freezing: every command this server started there has entered the workshop's freezer cgroup (or ended). */
  private async waitExecsEntered(row: WorkshopRow): Promise<void> {
    const freezer = row.sandbox?.cgroups?.freezer;
    const execs = this.shared.running.get(row.id);
    if (!freezer || !execs) return;
    const suffix = `:freezer:${freezer.replace(/^\/sys\/fs\/cgroup\/freezer/, '')}`;
    const deadline = Date.now() + 1000;
    for (const exec of execs) {
      while (Date.now() < deadline) {
        let groups: string;
        try {
          groups = readFileSync(`/proc/${exec.pid}/cgroup`, 'utf8');
        } catch {
          break; // ended
        }
        if (groups.split('\n').some((l) => l.endsWith(suffix))) break;
        await new Promise((r) => setTimeout(r, 1));
      }
    }
  }

  /**
   * Collects a command's output up to `maxBytes`. Past it: `kill` stops the command, `drop`
   * keeps the beginning and lets the command finish, `keep-tail` keeps the end (build logs).
   */
  async collectOutput(
    started: RunningExec | Promise<RunningExec>,
    opts: { maxBytes: number; overflow?: 'kill' | 'drop' | 'keep-tail' },
  ): Promise<{ exitCode: number; signal: string | null; stdout: Buffer; stderr: Buffer; truncated: boolean }> {
    const run = await started;
    const mode = opts.overflow ?? 'kill';
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let truncated = false;
    const collect = (into: Buffer[]) => (c: Buffer) => {
      // Past the limit nothing more is kept (unless keeping the tail), even if a detached process keeps writing.
      if (truncated && mode !== 'keep-tail') return;
      if (mode === 'drop' && size + c.length > opts.maxBytes) {
        truncated = true;
        return;
      }
      into.push(c);
      size += c.length;
      if (size <= opts.maxBytes) return;
      truncated = true;
      if (mode === 'keep-tail') {
        // Long build output (npm ci) is normal: keep only its end, for the failure reason.
        while (size > opts.maxBytes && (out.length > 1 || err.length > 1)) {
          const from = out.length >= err.length ? out : err;
          size -= from.shift()!.length;
        }
      } else run.kill();
    };
    run.stdout.on('data', collect(out));
    run.stderr.on('data', collect(err));
    const { exitCode, signal } = await run.done;
    return { exitCode, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err), truncated };
  }

  private workspacePath(path: string): string {
    if (!path || path.includes('\0'))
      throw new AtelierError('INVALID_ARGUMENT', 'path is required and may not contain NUL', { field: 'path' });
    const full = posix.normalize(posix.isAbsolute(path) ? path : posix.join('/workspace', path));
    if (full !== '/workspace' && !full.startsWith('/workspace/'))
      throw new AtelierError('PERMISSION_DENIED', `path ${path} is outside /workspace`, { field: 'path' });
    return full;
  }

  // Runs inside the sandbox as the workshop user: a symlink can never reach a host file.
  private static readonly READ_SCRIPT = `p=$(realpath -e -- "$1" 2>/dev/null) || exit 66
case "$p" in /workspace|/workspace/*) ;; *) exit 77;; esac
[ -f "$p" ] || exit 65
[ "$(stat -c %s -- "$p")" -le "$2" ] || exit 75
exec cat -- "$p"`;

  private static readonly WRITE_SCRIPT = `p=$(realpath -m -- "$1") || exit 66
case "$p" in /workspace/*) ;; *) exit 77;; esac
mkdir -p -- "$(dirname -- "$p")" || exit 73
[ -d "$p" ] && exit 65
t="$p.atelier-$$"
if cat > "$t"; then mv -f -- "$t" "$p" || { rm -f -- "$t"; exit 74; }; else rm -f -- "$t"; exit 74; fi`;

  private fileError(code: number, path: string, stderr: Buffer): AtelierError {
    switch (code) {
      case 66:
        return new AtelierError('NOT_FOUND', `${path} does not exist in the workspace`, { field: 'path' });
      case 77:
        return new AtelierError('PERMISSION_DENIED', `${path} resolves outside /workspace`, { field: 'path' });
      case 65:
        return new AtelierError('INVALID_ARGUMENT', `${path} is not a regular file`, { field: 'path' });
      case 75:
        return new AtelierError('PAYLOAD_TOO_LARGE', `${path} is larger than ${MAX_FILE_BYTES} bytes: read it with \`atelier exec\``, {
          field: 'path',
        });
      default:
        return new AtelierError('INVALID_ARGUMENT', `could not access ${path}: ${stderr.toString('utf8').trim() || `exit ${code}`}`, {
          field: 'path',
        });
    }
  }

  /** Reads a file of the workspace (at most 16 MiB). */
  async readFile(id: string, path: string, actor: Principal): Promise<Buffer> {
    const full = this.workspacePath(path);
    const r = await this.collectOutput(
      this.startLocked(
        id,
        { actor, action: 'read' },
        ['/bin/sh', '-c', WorkshopService.READ_SCRIPT, 'sh', full, String(MAX_FILE_BYTES)],
        '/workspace',
        {},
      ),
      {
        maxBytes: MAX_FILE_BYTES + 1,
      },
    );
    if (r.exitCode !== 0) throw this.fileError(r.exitCode, path, r.stderr);
    return r.stdout;
  }

  /** Writes a file of the workspace atomically (temporary file, then rename). */
  async writeFile(id: string, path: string, content: Buffer, actor: Principal): Promise<{ path: string; bytes: number }> {
    const full = this.workspacePath(path);
    if (content.length > MAX_FILE_BYTES)
      throw new AtelierError('PAYLOAD_TOO_LARGE', `file content is larger than ${MAX_FILE_BYTES} bytes`, { field: 'body' });
    const r = await this.collectOutput(
      this.startLocked(
        id,
        { actor, action: 'operate' },
        ['/bin/sh', '-c', WorkshopService.WRITE_SCRIPT, 'sh', full],
        '/workspace',
        {},
        content,
      ),
      {
        maxBytes: 64 << 10,
      },
    );
    if (r.exitCode !== 0) throw this.fileError(r.exitCode, path, r.stderr);
    return { path: full, bytes: content.length };
  }

  /** The workspace's changes against HEAD, and the untracked files. */
  async gitDiff(id: string, actor: Principal): Promise<{ diff: string; untracked: string[]; truncated: boolean }> {
    const script =
      'b=HEAD; git rev-parse -q --verify HEAD >/dev/null 2>&1 || b=4b825dc642cb6eb9a060e54bf8d69288fbee4904; exec git -c core.quotepath=off diff --no-ext-diff --no-color "$b"';
    const access: Access = { actor, action: 'read' };
    const d = await this.collectOutput(this.startLocked(id, access, ['/bin/sh', '-c', script], '/workspace', {}), { maxBytes: 32 << 20 });
    if (d.exitCode !== 0 && !d.truncated)
      throw new AtelierError('INVALID_ARGUMENT', `git diff failed in the workspace: ${d.stderr.toString('utf8').trim()}`);
    const u = await this.collectOutput(
      this.startLocked(id, access, ['git', 'ls-files', '--others', '--exclude-standard', '-z'], '/workspace', {}),
      {
        maxBytes: 4 << 20,
      },
    );
    return { diff: d.stdout.toString('utf8'), untracked: u.stdout.toString('utf8').split('\0').filter(Boolean), truncated: d.truncated };
  }

  /**
   * A command of the server's own in a running workshop (as its user, in its sandbox, in
   * /workspace), output collected: the platform acting on an approved request, no caller's rights.
   */
  async runAsPlatform(id: string, command: string[], env: Record<string, string>, maxBytes: number) {
    return this.collectOutput(this.startLocked(id, undefined, command, '/workspace', env), { maxBytes });
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
