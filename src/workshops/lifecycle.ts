/**
 * A workshop's life: created (cloned, its sandbox started, its devcontainer commands run),
 * suspended, resumed, deleted, and brought back into agreement with the host after a start.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus as hostCpus, totalmem } from 'node:os';
import { join, posix } from 'node:path';
import {
  AtelierError,
  hashToken,
  writeFileAtomic,
  newApiToken,
  newId,
  newWorkshopId,
  formatSize,
  parseSize,
  type CreatePhaseEvent,
  type CreateWorkshopRequest,
  type Workshop,
  type WorkshopLimits,
} from '../core/index.js';
import { queryRows, withTransaction, type Pool } from '../db/index.js';
import { atLeast, type Principal } from '../identity/index.js';
import { EGRESS_PORT, HOST_TRUST_BUNDLE, listenInSandbox, TRUST_BUNDLE, type SandboxHandle, type SandboxLayout } from '../sandbox/index.js';
import {
  canonicalizeHost,
  createEgressPolicy,
  hostForAuthority,
  parseBinding,
  type CredentialBinding,
  type CredentialEntry,
  type EgressPolicy,
} from '../egress/index.js';
import { readDevcontainer } from './devcontainer.js';
import { readProjectSettings } from './project.js';
import type { WorkshopDriver } from './driver.js';
import type { WorkshopEvents } from './events.js';
import { cloneRepo, resolveRepoSource } from './repo.js';
import { mergeSimulators, precheckSimulators, simulatorName, type WorkshopContext } from './simulators.js';
import { phaseTimer, type PhaseTimer } from './phases.js';
import type { DeathWatch } from './deathWatch.js';
import { BASE_ENV, type WorkshopExecs } from './exec.js';
import { DEFAULT_ASK_HOLD_SECONDS, type ServiceOptions, type WorkshopRow, type WorkshopShared } from './shared.js';
import { RECOVERING, retryDelaySeconds, transientCause } from './recovery.js';

/** devcontainer lifecycle commands (npm ci, …) are stopped after this long. */
const CREATE_COMMAND_TIMEOUT_SECONDS = 30 * 60;

export class WorkshopLifecycle {
  private readonly pool: Pool;
  private readonly driver: WorkshopDriver;
  private readonly opts: ServiceOptions;
  /** Recoveries waiting for their next try (per workshop id, and `sweep` for the orphan sweep); cleared by close(). */
  private readonly retries = new Map<string, NodeJS.Timeout>();
  /** A workshop's reason before its recovery was retried, given back when it succeeds. */
  private readonly reasonsBefore = new Map<string, string | null>();
  private closed = false;

  constructor(
    private readonly shared: WorkshopShared,
    private readonly execs: WorkshopExecs,
    private readonly deaths: DeathWatch,
    private readonly events: WorkshopEvents,
  ) {
    this.pool = shared.pool;
    this.driver = shared.driver;
    this.opts = shared.opts;
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
    this.deaths.watch(row.id, handle);
    return started;
  }

  /** The workshop's live policy: the platform's allowlist, then the project's entries. */
  egressPolicy(row: WorkshopRow): EgressPolicy {
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
      this.opts.egress.broker?.setBindings(row.id, bindingsOf(row));
    } catch (err) {
      server.close();
      throw err;
    }
  }

  /** Clones the repository and starts the sandbox; returns when the workshop is Running or Failed. */
  async create(
    req: CreateWorkshopRequest,
    actor: Principal,
    onPhase?: (event: CreatePhaseEvent) => void,
    placement?: string,
  ): Promise<Workshop> {
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
          `INSERT INTO workshops (id, name, owner_id, tenant_id, node_id, status, repo, uid, cpus, memory_bytes, pids, budget_usd, placement)
           VALUES ($1, $2, $3, $11, $4, 'Building', $5, $6, $7, $8, $9, $10, $12) RETURNING *`,
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
            placement ?? null,
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
        throw new AtelierError(
          'ALREADY_EXISTS',
          `you already have a workshop named "${name}" (names are unique per owner: they address workshops as ids do): pick another --name`,
          { field: 'name' },
        );
      throw err;
    }
    return this.shared.locked(id, () => this.build(row, source, req, actor, phaseTimer(onPhase, this.opts.log)));
  }

  /**
   * The project's credential bindings, checked for this workshop: each host allowed by its policy,
   * each secret one its tenant has, and the person creating it one who may use the tenant's secrets
   * without asking (a maintainer or admin; never an agent).
   */
  private async checkBindings(row: WorkshopRow, actor: Principal): Promise<CredentialBinding[]> {
    const tenant = await this.opts.credentialPolicies?.forTenant(row.tenant_id);
    const project = await this.checkProjectBindings(row, actor, tenant?.check);
    // The tenant's policy's bindings first (their hosts cannot be the project's: checked above),
    // kept with the workshop's row as the project's are: a later policy change leaves it as it is.
    if (tenant && tenant.credentials.length > 0 && this.opts.egress.broker) {
      row.egress = { ...row.egress, credentials: [...tenant.credentials, ...(row.egress.credentials ?? [])] };
      return bindingsOf(row);
    }
    return project;
  }

  private async checkProjectBindings(
    row: WorkshopRow,
    actor: Principal,
    tenantCheck: ((b: CredentialBinding, where: string) => void) | undefined,
  ): Promise<CredentialBinding[]> {
    const entries = row.egress.credentials ?? [];
    if (entries.length === 0) return [];
    if (!this.opts.egress.broker) throw new AtelierError('UNAVAILABLE', 'this server has no credential broker: remove egress.credentials');
    if (actor.kind !== 'user' || !atLeast(actor.role, 'maintainer'))
      throw new AtelierError(
        'PERMISSION_DENIED',
        `atelier.yaml: egress.credentials binds the tenant's secrets, which only a maintainer or admin of ${actor.tenantName} may do: ask one to create this workshop, or remove the block`,
        { field: 'egress.credentials' },
      );
    const policy = this.egressPolicy(row);
    const out = bindingsOf(row);
    for (const [i, b] of out.entries()) {
      const where = `atelier.yaml: egress.credentials.${i}`;
      tenantCheck?.(b, `${where}.host`);
      const host = canonicalizeHost(b.host);
      if (host.kind === 'refused' || policy.evaluate(host, b.port, 'connect').outcome !== 'allow')
        throw new AtelierError(
          'INVALID_ARGUMENT',
          `${where}.host: ${b.host}:${b.port} is not allowed by the workshop's egress policy: add it to egress.allow`,
          {
            field: `egress.credentials.${i}`,
          },
        );
      const known = await queryRows(this.pool, 'SELECT 1 FROM secrets WHERE tenant_id = $1 AND name = $2', [row.tenant_id, b.secret]);
      if (known.length === 0)
        throw new AtelierError(
          'INVALID_ARGUMENT',
          `${where}.value: the secret ${b.secret} does not exist in tenant ${actor.tenantName}: set it first (\`atelier secrets set ${b.secret}\`)`,
          { field: `egress.credentials.${i}` },
        );
    }
    return out;
  }

  /**
   * A SECRET_REQUEST's use binding, checked as atelier.yaml's `egress.credentials` entries are
   * (the place named is `payload.host`, `payload.header` or `payload.value`): its value names the
   * requested secret, its host is one the workshop's live policy allows and the project does not
   * bind already (the project's binding would win). The host comes back canonical.
   */
  async checkSecretUse(row: WorkshopRow, name: string, use: CredentialEntry): Promise<CredentialEntry> {
    const refuse = (field: string, message: string): AtelierError =>
      new AtelierError('INVALID_ARGUMENT', message, { field: `payload.${field}` });
    if (!this.opts.egress.broker) throw refuse('host', 'this server has no credential broker: ask with "mode": "reveal" instead');
    let b: CredentialBinding;
    try {
      b = parseBinding(use, 'payload');
    } catch (err) {
      const message = (err as Error).message;
      throw refuse(/^payload\.(\w+)/.exec(message)?.[1] ?? 'value', message);
    }
    if (b.secret !== name)
      throw refuse('value', `payload.value: names the secret ${b.secret}, but the request is for ${name}: write \${secret:${name}}`);
    const host = canonicalizeHost(b.host);
    if (host.kind === 'refused' || this.egressPolicy(row).evaluate(host, b.port, 'connect').outcome !== 'allow')
      throw refuse(
        'host',
        `payload.host: ${b.host}:${b.port} is not allowed by the workshop's egress policy: ask for it first (an ALLOWLIST_EXPANSION request) or add it to egress.allow in atelier.yaml`,
      );
    (await this.opts.credentialPolicies?.forTenant(row.tenant_id))?.check(b, 'payload.host');
    if (this.opts.egress.llmGateway?.bindingFor(b.host, b.port))
      throw refuse('host', `payload.host: ${b.host}:${b.port} is a model provider of the LLM gateway, which adds its key itself`);
    if (bindingsOf(row).some((p) => p.host === b.host && p.port === b.port))
      throw refuse('host', `payload.host: atelier.yaml's egress.credentials already binds ${b.host}:${b.port}; that binding is used`);
    const authority = hostForAuthority(host);
    return { host: b.port === 443 ? authority : `${authority}:${b.port}`, header: b.header, value: use.value };
  }

  /**
   * What makes the workshop's tools trust the broker's certificates: its CA alone, and the host's
   * bundle with it, in the server-written directory seen read-only at /run/atelier; the usual
   * variables name them.
   */
  private async trustBroker(id: string, layout: SandboxLayout): Promise<Record<string, string>> {
    const ca = await this.opts.egress.broker!.authorityPem(id);
    let system = '';
    try {
      system = readFileSync(HOST_TRUST_BUNDLE, 'utf8');
    } catch {
      // no system bundle: the workshop trusts its CA alone
    }
    const bundle = `${system.trimEnd()}\n${ca}`;
    writeFileAtomic(join(layout.run, 'egress-ca.pem'), ca, 0o644);
    writeFileAtomic(join(layout.run, 'ca-certificates.crt'), bundle, 0o644);
    // The system store inside is the workshop's own copy, bound by its inode: written in place,
    // at create, before any of the workshop's own commands runs.
    const own = join(layout.etc, TRUST_BUNDLE);
    if (existsSync(own)) writeFileSync(own, bundle);
    const inside = '/run/atelier/ca-certificates.crt';
    return {
      SSL_CERT_FILE: inside,
      CURL_CA_BUNDLE: inside,
      REQUESTS_CA_BUNDLE: inside,
      GIT_SSL_CAINFO: inside,
      NODE_EXTRA_CA_CERTS: '/run/atelier/egress-ca.pem',
    };
  }

  private async build(
    row: WorkshopRow,
    source: ReturnType<typeof resolveRepoSource>,
    req: CreateWorkshopRequest,
    actor: Principal,
    phase: PhaseTimer,
  ): Promise<Workshop> {
    const id = row.id;
    let handle: SandboxHandle | null = null;
    try {
      // Its egress CA (~5 ms of CPU: a key and a signature) is made while the disk, the sandbox
      // and the clone wait on I/O; trustBroker then finds it ready (Authorities keeps the promise).
      this.opts.egress.broker?.authorityPem(id).catch(() => undefined);
      const layout = await this.driver.prepareRoot(id, this.diskBytes(req));
      // The sandbox (bound to the workspace directory, not its contents) and its egress listener
      // start while the repository is cloned: neither needs the files. Until the project's policy
      // is read, the listener has none (every request is refused); nothing runs inside yet anyway.
      mkdirSync(layout.workspace, { mode: 0o700 });
      const started = phase.time('sandbox', undefined, async () => {
        const h = await this.startSandbox(row);
        handle = h;
        // The internal names' listeners open beside the egress one (publish, below, waits for them).
        void this.opts.simulators.prepareBase(this.shared.context(row, h)).catch(() => undefined);
        await this.openEgress(row, h, null);
        return h;
      });
      const [sandbox, clone] = await Promise.allSettled([
        started,
        phase.time('clone', undefined, () => cloneRepo(source, layout.workspace)),
      ]);
      if (clone.status === 'rejected') throw clone.reason;
      if (sandbox.status === 'rejected') throw sandbox.reason;
      const dev = readDevcontainer(layout.workspace, req.devcontainer, BASE_ENV);
      const project = readProjectSettings(layout.workspace);
      row.egress = project.egress;
      const bindings = await this.checkBindings(row, actor);
      this.opts.egress.proxy.setPolicy(id, this.egressPolicy(row));
      this.opts.egress.broker?.setBindings(id, bindings);
      await this.driver.adoptWorkspace(id, row.uid);
      // Every workshop trusts its broker when there is one: a SECRET_REQUEST in use mode binds a
      // host later, and tools started before it must trust the proxy's certificates then.
      const env: Record<string, string> = {
        ...this.opts.egress.llmGateway?.env,
        ...dev.env,
        ...(this.opts.egress.broker ? await this.trustBroker(id, layout) : {}),
      };
      if (req.budgetUsd !== undefined) env.ATELIER_MAX_BUDGET_USD = String(req.budgetUsd);
      await queryRows(
        this.pool,
        'UPDATE workshops SET env = $2, forward_ports = $3, warnings = $4, egress = $5, approval_commands = $6 WHERE id = $1',
        [
          id,
          JSON.stringify(env),
          dev.forwardPorts,
          JSON.stringify(dev.warnings),
          JSON.stringify(row.egress),
          JSON.stringify(project.approvalCommands),
        ],
      );
      await queryRows(this.pool, 'UPDATE workshops SET sandbox = $2 WHERE id = $1', [id, JSON.stringify(handle)]);
      const current = { ...row, env, sandbox: handle! };
      // Simulators start before the devcontainer's commands, which may well migrate a database.
      // One that fails is reported Failed in `atelier simulators list`; the workshop goes on.
      const simulators = mergeSimulators(project.simulators, req.simulators ?? []);
      // Called with none too: it also sets up the workshop's internal names (api, mcp). Shown as a
      // phase only when there are simulators.
      const end = simulators.length > 0 ? phase.start('simulators', simulators.map(simulatorName).join(', ')) : () => undefined;
      const views = await this.opts.simulators.start(this.shared.context(row, handle!), simulators).catch((err: unknown) => {
        end(false);
        throw err;
      });
      // One that failed to start is `failed` here too, though the workshop goes on (see above).
      end(views.every((v) => v.status !== 'Failed'));
      for (const step of dev.createCommands) {
        const endStep = phase.start('devcontainer', step.key);
        const result = await this.execs
          .collectOutput(this.execs.spawn(current, step.command, '/workspace', {}, undefined, CREATE_COMMAND_TIMEOUT_SECONDS), {
            maxBytes: 64 << 10,
            overflow: 'keep-tail',
          })
          .catch((err: unknown) => {
            endStep(false);
            throw err;
          });
        endStep(result.exitCode === 0);
        if (result.exitCode !== 0) {
          const tail = (result.stderr.toString('utf8') || result.stdout.toString('utf8')).trim().split('\n').slice(-5).join('\n');
          throw new AtelierError(
            'SANDBOX_FAILED',
            `devcontainer ${step.key} exited with code ${result.exitCode}${tail ? `: ${tail}` : ''}`,
          );
        }
      }
      await queryRows(this.pool, 'UPDATE workshops SET built_at = now() WHERE id = $1', [id]);
      const built = await this.shared.setStatus(id, 'Running', null);
      this.deaths.watch(id, handle!);
      return this.shared.view(built);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      this.opts.log.warn({ workshop: id, err: reason }, 'workshop build failed');
      await this.opts.simulators.removeAll(id).catch(() => undefined);
      await this.driver.stop(id, handle).catch(() => undefined);
      await this.opts.egress.proxy.close(id).catch(() => undefined);
      // The workshop stays, Failed with the reason, until the user deletes it.
      const failed = await this.shared.setStatus(id, 'Failed', reason, null).catch(() => null);
      if (failed) {
        await this.ended(id, reason);
        return this.shared.view(failed);
      }
      throw err;
    }
  }

  /** Freezes every process of the workshop (cgroup freezer); memory and files stay as they are. */
  async stop(id: string, actor: Principal): Promise<Workshop> {
    let stopped = false;
    const w = await this.shared.locked(id, async () => {
      const row = await this.shared.row(id, { actor, action: 'operate' });
      if (row.status === 'Suspended') return this.shared.view(row);
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
      await this.driver.suspend(row.sandbox);
      stopped = true;
      return this.shared.view(await this.shared.setStatus(id, 'Suspended', null));
    });
    if (stopped) await this.events.emit({ type: 'stopped', id: w.id });
    return w;
  }

  /** Thaws a suspended workshop, or starts its sandbox again if its processes were lost. */
  async resume(id: string, actor: Principal): Promise<Workshop> {
    return this.shared.locked(id, async () => {
      const row = await this.shared.row(id, { actor, action: 'operate' });
      if (row.status === 'Running') return this.shared.view(row);
      if (row.status === 'Dead') {
        this.opts.log.info({ workshop: id, was: row.status_reason }, 'starting a dead workshop again');
        return this.shared.view(
          await this.restartSandbox(row, `started again, files kept; it had died: ${row.status_reason ?? 'no reason recorded'}`),
        );
      }
      if (row.status === 'Failed') return this.shared.view(await this.resumeFailed(row));
      if (row.status !== 'Suspended')
        throw new AtelierError('WORKSHOP_NOT_RUNNING', `workshop ${id} is ${row.status} and cannot be resumed`, {
          id,
          status: row.status,
        });
      if (row.sandbox && this.driver.alive(row.sandbox)) {
        await this.driver.resume(row.sandbox);
        return this.shared.view(await this.shared.setStatus(id, 'Running', null));
      }
      return this.shared.view(
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
      this.deaths.unwatch(id);
      await this.shared.setStatus(id, 'Deleting', null);
      await this.opts.simulators.removeAll(id);
      await this.opts.egress.proxy.close(id);
      this.opts.egress.broker?.forget(id);
      await this.driver.destroy(id, row.sandbox).catch((err: Error) => {
        throw new AtelierError('SANDBOX_FAILED', `workshop ${id} could not be removed completely (${err.message}); run the delete again`, {
          id,
        });
      });
      await queryRows(this.pool, 'DELETE FROM workshops WHERE id = $1', [id]);
    });
    await this.events.emit({ type: 'deleted', id: found.id });
  }

  /** See WorkshopService.forget: refused unless the workshop's node was removed. */
  async forget(id: string, actor: Principal): Promise<void> {
    const found = await this.shared.row(id, { actor, action: 'delete' }, true);
    const node = this.opts.nodes?.describe(found.node_id);
    if (found.node_id === this.opts.nodeId || !node || node.removedAt === null)
      throw new AtelierError(
        'CONFLICT',
        `workshop ${id} runs on node ${node?.name ?? found.node_id}, a node of the installation: delete it there`,
        {
          id,
        },
      );
    this.opts.log.warn(
      { workshop: id, node: node.name },
      'deleting the record of a workshop of a removed node (its files were on that node)',
    );
    await this.events.emit({ type: 'deleting', id: found.id });
    await queryRows(this.pool, 'DELETE FROM workshops WHERE id = $1', [found.id]);
    await this.events.emit({ type: 'deleted', id: found.id });
  }

  /**
   * Starts a Failed workshop again when it has files to keep (it was built once, its directory is
   * there): its sandbox taken back if it still runs, else started afresh. One that failed during
   * its first build has nothing to keep: delete it and create it again.
   */
  private async resumeFailed(row: WorkshopRow): Promise<WorkshopRow> {
    const id = row.id;
    const was = row.status_reason ?? 'no reason recorded';
    if (row.built_at === null || !existsSync(this.driver.layout(id).root))
      throw new AtelierError(
        'WORKSHOP_NOT_RUNNING',
        `workshop ${id} failed during its first build (${was}) and has no files to keep: delete it and create it again`,
        { id, status: row.status },
      );
    this.opts.log.info({ workshop: id, was }, 'starting a failed workshop again');
    if (row.sandbox && this.driver.alive(row.sandbox)) {
      const sandbox = row.sandbox;
      await this.adopt({ ...row, sandbox });
      const status = this.driver.frozen(sandbox) ? 'Suspended' : 'Running';
      return this.shared.setStatus(id, status, `taken back, its processes and files kept; it had failed: ${was}`);
    }
    return this.restartSandbox(row, `started again, files kept; it had failed: ${was}`);
  }

  /** A workshop just marked Failed: what waited for it (its pending approvals) ends, saying why. */
  private async ended(id: string, reason: string): Promise<void> {
    await this.opts
      .onEnded?.(id, `the workshop failed: ${reason}`)
      .catch((err: unknown) => this.opts.log.warn({ workshop: id, err: String(err) }, 'could not end the approvals of a failed workshop'));
  }

  /** A live sandbox taken back (after a start, or a resume of a Failed one): watched, its way out and its simulators back. */
  private async adopt(row: WorkshopRow & { sandbox: SandboxHandle }): Promise<void> {
    this.deaths.watch(row.id, row.sandbox);
    await this.openEgress(row, row.sandbox);
    await this.opts.simulators.recover(this.shared.context(row, row.sandbox));
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

  /**
   * One workshop of reconcile(), on its row as it is now (`first`: the try at the server's start,
   * the only one that may kill commands a previous server process left). Throws what failed.
   */
  private async reconcileRow(row: WorkshopRow, first: boolean): Promise<void> {
    const id = row.id;
    const alive = row.sandbox !== null && this.driver.alive(row.sandbox);
    if (row.status === 'Building') {
      await this.driver.stop(id, row.sandbox);
      const reason = 'the server stopped while this workshop was being created: delete it and create it again';
      await this.shared.setStatus(id, 'Failed', reason, null);
      await this.ended(id, reason);
    } else if (row.status === 'Deleting') {
      await this.driver.destroy(id, row.sandbox);
      await queryRows(this.pool, 'DELETE FROM workshops WHERE id = $1', [id]);
    } else if (alive && (row.status === 'Running' || row.status === 'Suspended' || (row.status === 'Failed' && row.built_at !== null))) {
      // Its sandbox lives (a Failed one: its recovery had failed and kept it): taken back as it is.
      const sandbox = row.sandbox!;
      if (first) {
        const orphans = this.driver.killOrphanExecs(sandbox);
        if (orphans > 0) this.opts.log.warn({ workshop: id, orphans }, 'killed commands left running by a previous server process');
      }
      await this.adopt({ ...row, sandbox });
      const status = this.driver.frozen(sandbox) ? 'Suspended' : 'Running';
      const retried = row.status_reason?.startsWith(RECOVERING) === true;
      if (status !== row.status || retried) {
        const before = this.reasonsBefore.get(id);
        const reason =
          row.status === 'Failed'
            ? `recovered after a restart, its processes and files kept; it had failed: ${row.status_reason ?? ''}`
            : null;
        await this.shared.setStatus(id, status, status === row.status && retried ? (before ?? null) : reason);
      }
      this.reasonsBefore.delete(id);
      if (retried) this.opts.log.info({ workshop: id }, 'workshop recovered after a restart');
    } else if (row.status === 'Running' || row.status === 'Suspended') {
      await this.deaths.markDead(row, this.deaths.lostReason(row));
    } else if ((row.status === 'Dead' || row.status === 'Failed') && row.sandbox) {
      await this.driver.stop(id, row.sandbox);
      await this.shared.setStatus(id, row.status, row.status_reason, null);
    }
  }

  /**
   * One workshop of reconcile(), under its lock, its row read afresh (the server serves while a
   * recovery is retried: it may have been stopped, deleted or found dead meanwhile). Never throws:
   * a transient failure (see transientCause) is retried with backoff, its sandbox and simulators
   * untouched, its reason saying so; a permanent one ends the workshop Failed, but a live sandbox
   * is never torn down for it (`atelier workshops resume` tries again).
   */
  private async reconcileOne(id: string, attempt: number, known?: WorkshopRow): Promise<void> {
    if (this.closed) return;
    let row: WorkshopRow | undefined = known;
    try {
      await this.shared.locked(id, async () => {
        if (!row) [row] = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]);
        if (!row || row.node_id !== this.opts.nodeId) return;
        await this.reconcileRow(row, attempt === 0);
      });
    } catch (err) {
      const cause = transientCause(err);
      if (cause !== undefined && !this.closed) {
        await this.retryLater(id, row, attempt, cause, err);
        return;
      }
      await this.giveUp(id, row, err);
    }
  }

  /** A transient failure: the workshop says what is happening and is tried again after the backoff. */
  private async retryLater(id: string, row: WorkshopRow | undefined, attempt: number, cause: string, err: unknown): Promise<void> {
    const next = attempt + 1;
    const seconds = retryDelaySeconds(next);
    this.opts.log.warn(
      { workshop: id, attempt: next, err: err instanceof Error ? err.message : String(err) },
      `could not recover the workshop yet (${cause}): retrying in ${seconds} s; its sandbox and files are untouched`,
    );
    if (row && (row.status === 'Running' || row.status === 'Suspended')) {
      if (!this.reasonsBefore.has(id) && !row.status_reason?.startsWith(RECOVERING)) this.reasonsBefore.set(id, row.status_reason);
      // The database may well be what failed: the reason is written when it can be.
      await queryRows(this.pool, "UPDATE workshops SET status_reason = $2 WHERE id = $1 AND status IN ('Running', 'Suspended')", [
        id,
        `${RECOVERING}: ${cause}; retrying (attempt ${next}, next in ${seconds} s)`,
      ]).catch(() => undefined);
    }
    this.schedule(id, seconds, () => this.reconcileOne(id, next));
  }

  /** A permanent failure: Failed with the reason; a live sandbox (and its simulators) is kept for a resume. */
  private async giveUp(id: string, row: WorkshopRow | undefined, err: unknown): Promise<void> {
    const message = err instanceof Error ? err.message : String(err);
    this.opts.log.error({ workshop: id, err: message }, 'reconcile failed for a workshop');
    this.reasonsBefore.delete(id);
    const current = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]).catch(() => []);
    const sandbox = current[0]?.sandbox ?? row?.sandbox ?? null;
    if (!current[0] && !row) return;
    let reason = `could not be recovered after a restart: ${message}`;
    if (sandbox && this.driver.alive(sandbox) && (current[0] ?? row)?.built_at) {
      this.deaths.unwatch(id);
      reason += `; its sandbox and files are kept: run \`atelier workshops resume ${id}\` to try again`;
      const failed = await this.shared.setStatus(id, 'Failed', reason).catch(() => null);
      if (failed) await this.ended(id, reason);
      return;
    }
    // Nothing lives to keep (or it was never built): its processes must not be left running untracked.
    await this.driver.stop(id, sandbox).catch(() => undefined);
    await this.opts.egress.proxy.close(id).catch(() => undefined);
    const failed = await this.shared.setStatus(id, 'Failed', reason, null).catch(() => null);
    if (failed) await this.ended(id, reason);
  }

  /** Runs `fn` in the background after `seconds` (one pending try per key; the timer never keeps the process alive). */
  private schedule(key: string, seconds: number, fn: () => Promise<void>): void {
    if (this.closed) return;
    clearTimeout(this.retries.get(key));
    const timer = setTimeout(() => {
      this.retries.delete(key);
      void fn().catch((err: unknown) => this.opts.log.error({ err: String(err), key }, 'a recovery retry failed'));
    }, seconds * 1000);
    timer.unref();
    this.retries.set(key, timer);
  }

  /** Removes directories and cgroups that no row claims; retried in the background if the database cannot say. */
  private async sweepOrphans(attempt = 0): Promise<void> {
    let known: Set<string>;
    try {
      known = new Set((await queryRows<{ id: string }>(this.pool, 'SELECT id FROM workshops')).map((r) => r.id));
    } catch (err) {
      const cause = transientCause(err);
      if (cause === undefined) throw err;
      const seconds = retryDelaySeconds(attempt + 1);
      this.opts.log.warn({ err: String(err) }, `could not look for orphan workshops (${cause}): retrying in ${seconds} s`);
      this.schedule('sweep', seconds, () => this.sweepOrphans(attempt + 1));
      return;
    }
    for (const id of this.driver.localIds()) {
      if (known.has(id)) continue;
      this.opts.log.warn({ workshop: id }, 'removing an orphan workshop directory or cgroup');
      await this.opts.simulators.removeAll(id).catch(() => undefined);
      await this.driver
        .destroy(id, null)
        .catch((err: Error) => this.opts.log.error({ workshop: id, err: err.message }, 'could not remove an orphan workshop'));
    }
  }

  /**
   * Brings the database and this host into agreement after a start (also after `kill -9`):
   * half-built workshops fail cleanly, half-deleted ones finish, lost sandboxes are Dead, live
   * ones are taken back, and directories or cgroups that no row claims are removed. Returns after
   * one try for each workshop; what failed for a transient cause is retried in the background.
   */
  async reconcile(attempt = 0): Promise<void> {
    let rows: WorkshopRow[];
    try {
      rows = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE node_id = $1', [this.opts.nodeId]);
    } catch (err) {
      const cause = transientCause(err);
      if (cause === undefined) throw err;
      const seconds = retryDelaySeconds(attempt + 1);
      this.opts.log.warn({ err: String(err) }, `could not list the workshops to recover (${cause}): retrying in ${seconds} s`);
      this.schedule('reconcile', seconds, () => this.reconcile(attempt + 1));
      rows = [];
    }
    // Workshops are independent: several at once (each reopens listeners in its namespace, ~40 ms).
    const queue = [...rows];
    const worker = async (): Promise<void> => {
      for (let row = queue.shift(); row; row = queue.shift()) await this.reconcileOne(row.id, 0, row);
    };
    await Promise.all(Array.from({ length: Math.min(8, queue.length) }, worker));
    if (attempt === 0) {
      this.opts.simulators.startWatchdog(() => this.runningContexts());
      this.deaths.start();
    }
    if (!this.retries.has('reconcile')) await this.sweepOrphans();
  }

  /** Stops the recoveries waiting for their next try (at shutdown). */
  close(): void {
    this.closed = true;
    for (const timer of this.retries.values()) clearTimeout(timer);
    this.retries.clear();
  }
}

/** The bindings a workshop's row holds (checked when it was created). */
function bindingsOf(row: WorkshopRow): CredentialBinding[] {
  return (row.egress.credentials ?? []).map((e, i) => parseBinding(e, `egress.credentials.${i}`));
}
