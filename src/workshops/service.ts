import { isDeepStrictEqual } from 'node:util';
import {
  AtelierError,
  isWorkshopId,
  type CreatePhaseEvent,
  type CreateWorkshopRequest,
  type ExecRequest,
  type SimulatorRequest,
  type Workshop,
  type WorkshopDisk,
  type WorkshopUsage,
} from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import { atLeast, type Principal, type WorkshopAction } from '../identity/index.js';
import { type SandboxHandle } from '../sandbox/index.js';
import { type CredentialBinding, type CredentialEntry, type EgressRecord } from '../egress/index.js';
import type { WorkshopDriver } from './driver.js';
import { WorkshopEvents } from './events.js';
import { resolveRepoSource } from './repo.js';
import { type SimulatorView } from './simulators.js';
import { DeathWatch } from './deathWatch.js';
import { SpendLedger, type SpendTotals } from './spend.js';
import { WorkshopExecs } from './exec.js';
import { WorkshopFiles } from './files.js';
import { WorkshopLifecycle } from './lifecycle.js';
import { WorkshopShared, type Access, type ApprovalOrigin, type RunningExec, type ServiceOptions, type WorkshopRow } from './shared.js';

export type { EgressWiring, ExecGate, NodeDirectory, RunningExec, ServiceOptions } from './shared.js';

/**
 * Workshops: the product's core noun. Every entry point (CLI, REST, MCP) goes through here. The
 * work is done by its rooms (lifecycle.ts, deathWatch.ts, exec.ts, files.ts), which share one
 * WorkshopShared (shared.ts): the row and its authorisation, the per-workshop lock, the running commands.
 */
export class WorkshopService {
  /** Lifecycle events (`deleting`, `stopped`, `deleted`) for the rooms that hold something per workshop. */
  readonly events: WorkshopEvents;
  private readonly shared: WorkshopShared;
  private readonly deaths: DeathWatch;
  private readonly execs: WorkshopExecs;
  private readonly files: WorkshopFiles;
  private readonly lifecycle: WorkshopLifecycle;
  private readonly spend: SpendLedger;

  constructor(
    private readonly pool: Pool,
    /** Where and how the sandboxes run; terminals ask it how to enter one. */
    readonly driver: WorkshopDriver,
    private readonly opts: ServiceOptions,
  ) {
    this.events = new WorkshopEvents(opts.log);
    this.shared = new WorkshopShared(pool, driver, opts, (id) => void this.deaths.noticeDeath(id));
    this.deaths = new DeathWatch(this.shared);
    this.execs = new WorkshopExecs(this.shared);
    this.files = new WorkshopFiles(this.execs);
    this.lifecycle = new WorkshopLifecycle(this.shared, this.execs, this.deaths, this.events);
    this.spend = new SpendLedger(pool);
  }

  /**
   * The id a caller means by `ref`: an id as it is, else a workshop name, resolved as the caller
   * sees names: their own workshop of that name first, else the tenant's only one (an agent token:
   * its own workshop only). Several others of that name: CONFLICT listing their ids. Used once per
   * request, on the `:id` of every `/v1/workshops/:id…` route, so every client gets names for free.
   */
  async resolveRef(ref: string, actor: Principal): Promise<string> {
    if (isWorkshopId(ref)) return ref;
    const missing = () =>
      new AtelierError(
        'WORKSHOP_NOT_FOUND',
        `workshop ${ref} does not exist: run \`atelier workshops list\` to see the ids and names of yours (a workshop is addressed by either)`,
        { id: ref },
      );
    // Only a name a workshop could have is looked up (anything else cannot name one).
    if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(ref)) throw missing();
    const rows = await queryRows<{ id: string; owner_id: string | null }>(
      this.pool,
      `SELECT id, owner_id FROM workshops WHERE tenant_id = $1 AND name = $2 AND ($3::text IS NULL OR id = $3) ORDER BY created_at`,
      [actor.tenantId, ref, actor.kind === 'agent' ? actor.workshopId : null],
    );
    const own = rows.filter((r) => r.owner_id === actor.userId);
    if (actor.kind !== 'agent' && own.length === 1) return own[0]!.id;
    if (rows.length === 1) return rows[0]!.id;
    if (rows.length === 0) throw missing();
    const ids = rows.map((r) => r.id);
    throw new AtelierError(
      'CONFLICT',
      `${rows.length} workshops of tenant ${actor.tenantName} are named ${ref}, none of them yours: use its id (${ids.join(', ')})`,
      { name: ref, ids },
    );
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
   * whatever the number of calls), with the request it came from, and applied to its live proxy at once.
   */
  async addApprovedEgress(id: string, entry: string, origin: ApprovalOrigin): Promise<void> {
    await queryRows(
      this.pool,
      `UPDATE workshops SET egress = jsonb_set(
           jsonb_set(egress, '{approved}', coalesce(egress->'approved', '[]'::jsonb) || to_jsonb($2::text)),
           '{origins}', coalesce(egress->'origins', '{}'::jsonb) || jsonb_build_object($2::text, $3::jsonb))
        WHERE id = $1 AND NOT coalesce(egress->'approved', '[]'::jsonb) ? $2`,
      [id, entry, JSON.stringify(origin)],
    );
    const [row] = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]);
    if (row && row.node_id === this.opts.nodeId && this.opts.egress.proxy.getPolicy(id))
      this.opts.egress.proxy.setPolicy(id, this.lifecycle.egressPolicy(row));
  }

  /**
   * A SECRET_REQUEST's use binding checked for this workshop (see WorkshopLifecycle.checkSecretUse);
   * returned normalised, or INVALID_ARGUMENT naming the payload field.
   */
  async checkSecretUse(id: string, name: string, use: CredentialEntry): Promise<CredentialEntry> {
    return this.lifecycle.checkSecretUse(await this.shared.row(id), name, use);
  }

  /** Hands this server's credential broker a workshop's granted bindings (the secret store's use grants). */
  setGrantedBindings(id: string, bindings: CredentialBinding[]): void {
    this.opts.egress.broker?.setGrantedBindings(id, bindings);
  }

  /** What the workshop's proxy decided, oldest first (see EgressJournal.list). */
  async egressLog(id: string, actor: Principal, opts: { afterId?: number; limit?: number }): Promise<EgressRecord[]> {
    await this.shared.row(id, { actor, action: 'read' });
    return this.opts.egress.journal.list(id, opts);
  }

  /**
   * Clones the repository and starts the sandbox; returns when the workshop is Running or Failed.
   * `onPhase` hears each step as it starts and ends (a request refused up front hears none).
   */
  create(req: CreateWorkshopRequest, actor: Principal, onPhase?: (event: CreatePhaseEvent) => void, placement?: string): Promise<Workshop> {
    return this.lifecycle.create(req, actor, onPhase, placement);
  }

  /** The caller's tenant's workshops on every node of the installation (an agent token: its own workshop only). */
  async list(actor: Principal): Promise<Workshop[]> {
    return (
      await queryRows<WorkshopRow>(
        this.pool,
        'SELECT * FROM workshops WHERE tenant_id = $1 AND ($2::text IS NULL OR id = $2) ORDER BY created_at',
        [actor.tenantId, actor.kind === 'agent' ? actor.workshopId : null],
      )
    ).map((r) => this.withDisk(r));
  }

  /** One workshop, wherever it runs (read from the database). */
  async get(id: string, actor: Principal): Promise<Workshop> {
    return this.withDisk(await this.shared.row(id, { actor, action: 'read' }, true));
  }

  // Only the node that runs it can read its disk: live there, as that node last published it
  // (publishDisks, with its heartbeat) everywhere else.
  private withDisk(r: WorkshopRow): Workshop {
    const w = this.shared.view(r);
    if (r.node_id === this.opts.nodeId) return { ...w, disk: this.driver.diskOf(r.id) };
    if (!r.disk) return w;
    // In the owner's field order (jsonb keeps its own): the same answer byte for byte through any node.
    const { enforced, quotaBytes, usedBytes, note } = r.disk;
    return { ...w, disk: { enforced, quotaBytes, usedBytes, note } };
  }

  /**
   * What the workshop's processes use now beside its limits, read from its sandbox's cgroups:
   * only the node that runs it can (the request is relayed there, src/server/app.ts).
   */
  async usage(id: string, actor: Principal): Promise<WorkshopUsage> {
    const row = await this.shared.row(id, { actor, action: 'read' });
    return { id, status: row.status, at: new Date().toISOString(), limits: this.shared.view(row).limits, ...this.driver.usageOf(id) };
  }

  /**
   * Writes the disk figures of the workshops this node runs into their rows, for the other nodes
   * to read (docs/replicas.md): called with each heartbeat. A row is written only when its figure
   * changed, so an idle installation writes nothing.
   */
  async publishDisks(): Promise<void> {
    const rows = await queryRows<{ id: string; disk: WorkshopDisk | null }>(
      this.pool,
      'SELECT id, disk FROM workshops WHERE node_id = $1',
      [this.opts.nodeId],
    );
    const changed = rows
      .map((r) => ({ id: r.id, was: r.disk, disk: this.driver.diskOf(r.id) }))
      .filter((r) => !isDeepStrictEqual(r.was, r.disk));
    if (changed.length === 0) return;
    await this.pool.query(
      `UPDATE workshops w SET disk = d.disk FROM unnest($2::text[], $3::jsonb[]) AS d(id, disk) WHERE w.id = d.id AND w.node_id = $1`,
      [this.opts.nodeId, changed.map((r) => r.id), changed.map((r) => JSON.stringify(r.disk))],
    );
  }

  /** The node that runs the workshop (its id), or undefined when there is no such workshop. */
  async nodeOf(id: string): Promise<string | undefined> {
    const [r] = await queryRows<{ node_id: string }>(this.pool, 'SELECT node_id FROM workshops WHERE id = $1', [id]);
    return r?.node_id;
  }

  /** Checks that `actor` may do `action` on the workshop (for routes that act on it indirectly). */
  async authorize(id: string, actor: Principal, action: WorkshopAction): Promise<void> {
    // A check on the row: answered by any node, wherever the workshop runs.
    await this.shared.row(id, { actor, action }, true);
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

  /**
   * Sets the workshop's LLM budget (null: none), enforced from its next model request: its owner
   * or a maintainer, never the workshop's own agent (the route refuses agent tokens).
   */
  async setBudget(id: string, actor: Principal, budgetUsd: number | null): Promise<Workshop> {
    await this.shared.row(id, { actor, action: 'delete' });
    await this.spend.setBudget(id, budgetUsd);
    return this.get(id, actor);
  }

  /** The tenant's spend through the LLM gateway, by user: a maintainer's tenant sees every line, others their own. */
  async spendReport(actor: Principal): Promise<{ tenant: SpendTotals; users: (SpendTotals & { userId: string | null })[] }> {
    const all = await this.spend.tenantTotals(actor.tenantId);
    return atLeast(actor.role, 'maintainer') ? all : { tenant: all.tenant, users: all.users.filter((u) => u.userId === actor.userId) };
  }

  /** Freezes every process of the workshop (cgroup freezer); memory and files stay as they are. */
  stop(id: string, actor: Principal): Promise<Workshop> {
    return this.lifecycle.stop(id, actor);
  }

  /** Thaws a suspended workshop, or starts its sandbox again if its processes were lost. */
  resume(id: string, actor: Principal): Promise<Workshop> {
    return this.lifecycle.resume(id, actor);
  }

  /** Kills the sandbox and removes every file, cgroup and row the workshop owned. */
  delete(id: string, actor: Principal): Promise<void> {
    return this.lifecycle.delete(id, actor);
  }

  /**
   * Deletes the record of a workshop whose node was removed from the installation (`atelier
   * nodes remove`): its row and what hangs on it (approvals ended, tokens); its files and
   * processes were on that node, which removes them if it is ever started again (orphans).
   */
  forget(id: string, actor: Principal): Promise<void> {
    return this.lifecycle.forget(id, actor);
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

  /** Stops one simulator by hand (files kept; a reset starts it again): those who may operate the workshop. */
  async stopSimulator(id: string, name: string, actor: Principal): Promise<SimulatorView> {
    return this.shared.locked(id, async () => {
      const row = await this.shared.runnable(id, { actor, action: 'operate' });
      return this.opts.simulators.stop(
        this.shared.context(row, row.sandbox),
        name,
        actor.kind === 'agent' ? `agent/${id}` : actor.userName,
      );
    });
  }

  /** Kills the commands this server process started and still waits for (at shutdown). */
  async close(): Promise<void> {
    this.lifecycle.close();
    this.deaths.stop();
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

  /**
   * Brings the database and this host into agreement after a start (also after `kill -9`):
   * half-built workshops fail cleanly, half-deleted ones finish, lost sandboxes are Dead, live ones
   * are taken back, and directories or cgroups that no row claims are removed. Returns after one
   * try each; a workshop whose recovery met a transient failure is retried in the background.
   */
  reconcile(): Promise<void> {
    return this.lifecycle.reconcile();
  }
}
