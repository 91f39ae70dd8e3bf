import { readFileSync } from 'node:fs';
import { CreateWorkshopRequest, describeZodError, type Config, type SimulatorRequest, type WorkshopStatus } from '../../core/index.js';
import { queryRows, type Pool } from '../../db/index.js';
import type { Principal, Role } from '../../identity/index.js';
import type { WorkshopService } from '../service.js';
import type { SimulatorView } from '../simulators.js';
import { simulatorName } from '../simulators.js';
import { KubeApiError, KubeClient, readKubeconfig, type KubeConnection, type KubeObject } from './client.js';
import { LeaseElector } from './leader.js';
import { updateWithRetry } from './sandboxes.js';

/**
 * The `Workshop` resource (`atelier.dev/v1alpha1`, deploy/helm/atelier/crds/) kept in step with
 * Atelier's workshops, both ways, by one replica at a time (a Lease, leader.ts):
 * - an object applied with kubectl (or GitOps) becomes a workshop named like it, owned by the
 *   configured user (never by a name the object gives: whoever may write Workshop objects in the
 *   namespace acts as that one user); its id goes into `status.workshopId` and a label;
 * - a workshop made through the CLI or the API becomes an object named by its id, labelled as
 *   Atelier's (`app.kubernetes.io/managed-by: atelier`), so it is never created twice;
 * - every object carries a finalizer: deleting it deletes the workshop first; a workshop deleted
 *   through the API has its object deleted;
 * - the workshop's state is written into `status` (phase, the Ready condition with its reason,
 *   its simulators); a simulator added to `spec.simulators` of a running workshop is started
 *   live, one removed is stopped.
 * It goes through WorkshopService only, and reads the workshops' rows for the list: nothing here
 * depends on the driver that runs the sandboxes. Level-triggered: each pass compares every object
 * with every workshop of the tenant; a watch event or the resync period starts the next pass.
 */

export const WORKSHOP_API = 'atelier.dev/v1alpha1';
export const FINALIZER = 'atelier.dev/workshop';
export const ID_LABEL = 'atelier.dev/workshop-id';
const MANAGED_BY = 'app.kubernetes.io/managed-by';

/** Its configuration: `ATELIER_K8S_*` (src/core/config.ts). */
export type WorkshopResourceConfig = NonNullable<Config['kubeWorkshops']>;

interface SimulatorSpec {
  name: string;
  type?: string;
  version?: string;
  env?: Record<string, string>;
  services?: string[];
  stubsDirectory?: string;
}

interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  observedGeneration?: number;
  lastTransitionTime?: string;
}

interface WorkshopStatusBlock {
  workshopId?: string;
  phase?: WorkshopStatus | 'Refused';
  observedGeneration?: number;
  appliedSimulators?: string[];
  simulators?: { name: string; type: string; status: string; reason?: string }[];
  conditions?: Condition[];
}

export interface WorkshopObject extends KubeObject {
  spec: {
    devcontainer: { gitUrl: string; path?: string };
    simulators?: SimulatorSpec[];
    resources?: { cpus?: number; memory?: string; disk?: string };
  };
  status?: WorkshopStatusBlock;
}

/**
 * The installation's other nodes (the server's Cluster, src/server/relay.ts): a workshop runs on
 * one node, and what must happen where it runs (a delete, a simulator) is asked of that node
 * through its API, with the controller's principal signed by this node, as the API relays any
 * request.
 */
export interface NodeRelay {
  /** False for a node that missed its heartbeats (its workshops are NodeUnreachable). */
  isLive(nodeId: string): boolean;
  call<T>(nodeId: string, principal: Principal, opts: { what: string; method: string; path: string; body?: unknown }): Promise<T>;
}

interface Row {
  id: string;
  node_id: string;
  name: string;
  owner_id: string | null;
  status: WorkshopStatus;
  status_reason: string | null;
  repo: string;
}

type Log = { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void };

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

/** The pod's service account: its token file is read again as the kubelet rotates it. */
const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

function inClusterConnection(where: { host: string; port: number }): KubeConnection {
  const dir = SERVICE_ACCOUNT;
  const host = where.host.includes(':') ? `[${where.host}]` : where.host;
  const conn: KubeConnection = { server: new URL(`https://${host}:${where.port}`), ca: readFileSync(`${dir}/ca.crt`) };
  Object.defineProperty(conn, 'token', { get: () => readFileSync(`${dir}/token`, 'utf8').trim(), enumerable: true });
  return conn;
}

export class WorkshopResourceController {
  private readonly base: string;
  private readonly elector: LeaseElector;
  /** The objects as the watch last told them, by name (only while leading). */
  private objects = new Map<string, WorkshopObject>();
  /** Objects or workshops with a create, delete or simulator change under way (by object name or workshop id). */
  private readonly busy = new Map<string, Promise<void>>();
  /** Refusals not to repeat until the object changes: `uid/generation/what`. */
  private readonly refused = new Set<string>();
  /** The last failure logged per object (not logged again while it repeats). */
  private readonly lastError = new Map<string, string>();
  private kicked = false;
  private wake: (() => void) | undefined;
  private loops: Promise<void>[] = [];

  constructor(
    private readonly pool: Pool,
    private readonly workshops: WorkshopService,
    private readonly client: KubeClient,
    private readonly config: WorkshopResourceConfig,
    /** This node's id: the lease's holder, and where workshops it creates run. */
    private readonly identity: string,
    private readonly log: Log,
    private readonly relay?: NodeRelay,
  ) {
    this.base = `/apis/${WORKSHOP_API}/namespaces/${config.namespace}/workshops`;
    this.elector = new LeaseElector({
      client,
      namespace: config.leaseNamespace ?? config.namespace,
      name: 'atelier-workshop-controller',
      identity,
      leaseMs: config.leaseMs,
      log,
      onStartedLeading: (signal) => {
        this.loops = [this.watchLoop(signal), this.passLoop(signal)];
      },
    });
  }

  get isLeader(): boolean {
    return this.elector.isLeader;
  }

  start(): void {
    this.elector.start();
  }

  async close(): Promise<void> {
    await this.elector.close();
    this.kick();
    await Promise.allSettled(this.loops);
    // A create or delete under way is not waited for: the server's own shutdown ends it, and the
    // next leader finds its workshop by name (or its object by id) and goes on.
    this.client.close();
  }

  private kick(): void {
    this.kicked = true;
    this.wake?.();
  }

  /**
   * List, then watch from the list's resourceVersion (`listAndWatch`: resumed from the last version
   * seen, relisted only on 410 Gone); any other failure is logged and the whole is started again.
   */
  private async watchLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.client.listAndWatch<WorkshopObject>(
          this.base,
          {
            list: (items) => {
              this.objects = new Map(items.map((o) => [o.metadata.name!, o]));
              this.kick();
            },
            event: (obj, deleted) => {
              if (deleted) this.objects.delete(obj.metadata.name!);
              else this.objects.set(obj.metadata.name!, obj);
              this.kick();
            },
          },
          signal,
          { timeoutSeconds: 60, retryMs: 1000 },
        );
      } catch (err) {
        if (signal.aborted) break;
        this.log.warn({ err: (err as Error).message }, 'workshop controller: the watch of Workshop objects failed; listing again');
        await sleep(1000, signal).catch(() => undefined);
      }
    }
  }

  /** One pass at a time: after a watch event, after a background change ends, and every resync period. */
  private async passLoop(signal: AbortSignal): Promise<void> {
    const resync = setInterval(() => this.kick(), this.config.resyncMs);
    signal.addEventListener('abort', () => this.wake?.(), { once: true });
    try {
      while (!signal.aborted) {
        if (!this.kicked) await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
        if (signal.aborted) break;
        this.kicked = false;
        try {
          await this.pass(signal);
        } catch (err) {
          this.log.warn({ err: (err as Error).message }, 'workshop controller: a reconcile pass failed; trying again');
          await sleep(1000, signal);
          this.kicked = true;
        }
      }
    } finally {
      clearInterval(resync);
    }
  }

  /** The configured owner as a principal of the tenant (read at each pass: a user added or removed later counts). */
  private async principal(): Promise<Principal | undefined> {
    const [u] = await queryRows<{ user_id: string; user_name: string; tenant_id: string; tenant_name: string; role: Role }>(
      this.pool,
      `SELECT u.id AS user_id, u.name AS user_name, t.id AS tenant_id, t.name AS tenant_name, m.role
         FROM users u JOIN memberships m ON m.user_id = u.id JOIN tenants t ON t.id = m.tenant_id
        WHERE u.name = $1 AND t.name = $2 AND u.disabled_at IS NULL`,
      [this.config.owner, this.config.tenant],
    );
    if (!u) return undefined;
    return {
      kind: 'user',
      userId: u.user_id,
      userName: u.user_name,
      tenantId: u.tenant_id,
      tenantName: u.tenant_name,
      role: u.role,
      workshopId: null,
      tokenId: null,
      via: 'api-token',
      expiresAt: null,
    };
  }

  private warnedOwner = false;

  private async pass(signal: AbortSignal): Promise<void> {
    const actor = await this.principal();
    if (!actor) {
      if (!this.warnedOwner)
        this.log.warn(
          { owner: this.config.owner, tenant: this.config.tenant },
          'workshop controller: its owner is not an enabled user of its tenant (ATELIER_K8S_WORKSHOPS_OWNER, ATELIER_K8S_WORKSHOPS_TENANT): add it (`atelier users add`); nothing is reconciled until then',
        );
      this.warnedOwner = true;
      return;
    }
    this.warnedOwner = false;
    const rows = await queryRows<Row>(
      this.pool,
      'SELECT id, node_id, name, owner_id, status, status_reason, repo FROM workshops WHERE tenant_id = $1 ORDER BY created_at',
      [actor.tenantId],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    const claimed = new Set<string>();
    for (const obj of [...this.objects.values()]) {
      if (signal.aborted) return;
      const name = obj.metadata.name!;
      const id = obj.metadata.labels?.[ID_LABEL] ?? obj.status?.workshopId;
      if (id) claimed.add(id);
      // A create under way (busy by name) may still be adopted: its row and id show as soon as they exist.
      if (id && this.busy.has(id)) continue;
      try {
        await this.reconcileObject(obj, id, byId, actor, claimed);
      } catch (err) {
        if (err instanceof KubeApiError && (err.status === 404 || err.status === 409)) continue;
        // Once per object and message: a pass runs every second or so.
        const message = (err as Error).message;
        if (this.lastError.get(name) === message) continue;
        this.lastError.set(name, message);
        this.log.warn({ err: message, object: name }, 'workshop controller: reconciling a Workshop object failed');
      }
    }
    // Workshops made through the CLI or the API: one object each.
    for (const row of rows) {
      if (signal.aborted) return;
      if (claimed.has(row.id) || this.busy.has(row.id) || row.status === 'Deleting') continue;
      // A create from an object of this name is under way, its label not yet written.
      if (row.owner_id === actor.userId && (this.busy.has(row.name) || this.objects.has(row.name))) continue;
      try {
        await this.mirror(row);
      } catch (err) {
        if (err instanceof KubeApiError && err.status === 409) continue;
        this.log.warn(
          { err: (err as Error).message, workshop: row.id },
          'workshop controller: the Workshop object of a workshop could not be made',
        );
      }
    }
  }

  private async reconcileObject(
    obj: WorkshopObject,
    id: string | undefined,
    byId: Map<string, Row>,
    actor: Principal,
    claimed: Set<string>,
  ): Promise<void> {
    const name = obj.metadata.name!;
    const finalizers = (obj.metadata.finalizers as string[] | undefined) ?? [];
    if (obj.metadata.deletionTimestamp) {
      if (!finalizers.includes(FINALIZER)) return;
      const row = id
        ? byId.get(id)
        : obj.metadata.labels?.[MANAGED_BY] === 'atelier'
          ? undefined
          : [...byId.values()].find((r) => r.owner_id === actor.userId && r.name === name);
      // Its create has not made the workshop's row yet: deleted once it has.
      if (!row && !id && this.busy.has(name)) return;
      if (row) {
        if (this.refused.has(`${obj.metadata.uid}/delete`)) return;
        this.background(row.id, async () => {
          try {
            await this.onNode(row, actor, () => this.workshops.delete(row.id, actor), 'DELETE', `/v1/workshops/${row.id}`);
          } catch (err) {
            // Not allowed (the owner is a member, the workshop someone else's): the object stays, saying why.
            this.refused.add(`${obj.metadata.uid}/delete`);
            await this.writeStatus(name, (s) => setCondition(s, 'Ready', 'False', 'DeleteRefused', (err as Error).message, obj));
            return;
          }
          await this.dropFinalizer(name);
        });
        return;
      }
      await this.dropFinalizer(name);
      return;
    }
    if (!finalizers.includes(FINALIZER)) {
      await updateWithRetry<WorkshopObject>(this.client, `${this.base}/${name}`, (o) => {
        const f = (o.metadata.finalizers as string[] | undefined) ?? [];
        if (f.includes(FINALIZER) || o.metadata.deletionTimestamp) return false;
        o.metadata.finalizers = [...f, FINALIZER];
        return true;
      });
    }
    if (id) {
      const row = byId.get(id);
      // Its workshop was deleted through the API or the CLI: the object goes too.
      if (!row) {
        await this.client.request('DELETE', `${this.base}/${name}`);
        return;
      }
      await this.syncSimulators(obj, row, actor);
      await this.mirrorStatus(obj, row, actor);
      return;
    }
    if (obj.metadata.labels?.[MANAGED_BY] === 'atelier') return;
    // An object of kubectl's: its workshop is named like it and owned by the configured user.
    const made = [...byId.values()].find((r) => r.owner_id === actor.userId && r.name === name);
    if (made) {
      claimed.add(made.id);
      await this.adopt(
        name,
        made.id,
        (obj.spec.simulators ?? []).map((s) => simulatorName(toRequest(s))),
      );
      return;
    }
    if (this.busy.has(name) || this.refused.has(`${obj.metadata.uid}/${obj.metadata.generation}/create`)) return;
    this.background(name, () => this.createFrom(obj, actor));
  }

  /** Runs `work` in the background under `key` (no pass touches that key meanwhile); a pass follows it. */
  private background(key: string, work: () => Promise<void>): void {
    const p = work()
      .catch((err: unknown) => this.log.warn({ err: (err as Error).message, key }, 'workshop controller: a background change failed'))
      .finally(() => {
        this.busy.delete(key);
        this.kick();
      });
    this.busy.set(key, p);
  }

  private async createFrom(obj: WorkshopObject, actor: Principal): Promise<void> {
    const name = obj.metadata.name!;
    const { devcontainer, simulators, resources } = obj.spec;
    const parsed = CreateWorkshopRequest.safeParse({
      repo: devcontainer.gitUrl,
      name,
      ...(devcontainer.path ? { devcontainer: devcontainer.path } : {}),
      ...(simulators?.length ? { simulators: simulators.map(toRequest) } : {}),
      ...(resources?.cpus !== undefined ? { cpus: resources.cpus } : {}),
      ...(resources?.memory ? { memory: resources.memory } : {}),
      ...(resources?.disk ? { disk: resources.disk } : {}),
    });
    let refusal: string | undefined;
    if (!parsed.success) refusal = `the workshop asked for is refused: ${describeZodError(parsed.error).message}`;
    else {
      this.log.info({ object: name, owner: actor.userName }, 'workshop controller: creating the workshop of a Workshop object');
      try {
        await this.workshops.create(parsed.data, actor);
        return;
      } catch (err) {
        // Refused before any row was made (a repository outside the allowed roots, a name taken…).
        refusal = (err as Error).message;
      }
    }
    this.refused.add(`${obj.metadata.uid}/${obj.metadata.generation}/create`);
    await this.writeStatus(name, (s) => {
      s.phase = 'Refused';
      s.observedGeneration = obj.metadata.generation;
      setCondition(s, 'Ready', 'False', 'CreateRefused', refusal, obj);
    });
  }

  /** Writes the workshop's id into the object's label and status. */
  private async adopt(name: string, id: string, applied: string[]): Promise<void> {
    await updateWithRetry<WorkshopObject>(this.client, `${this.base}/${name}`, (o) => {
      if (o.metadata.labels?.[ID_LABEL] === id) return false;
      o.metadata.labels = { ...o.metadata.labels, [ID_LABEL]: id };
      return true;
    });
    await this.writeStatus(name, (s) => {
      s.workshopId = id;
      s.appliedSimulators = applied;
    });
  }

  /** An object for a workshop made through the CLI or the API, named by its id. */
  private async mirror(row: Row): Promise<void> {
    await this.client.request('POST', this.base, {
      apiVersion: WORKSHOP_API,
      kind: 'Workshop',
      metadata: {
        name: row.id,
        namespace: this.config.namespace,
        labels: { [ID_LABEL]: row.id, [MANAGED_BY]: 'atelier' },
        annotations: { 'atelier.dev/name': row.name },
        finalizers: [FINALIZER],
      },
      spec: { devcontainer: { gitUrl: row.repo } },
    });
    await this.writeStatus(row.id, (s) => {
      s.workshopId = row.id;
      s.appliedSimulators = [];
    });
    this.log.info({ workshop: row.id }, 'workshop controller: made the Workshop object of a workshop');
  }

  private async mirrorStatus(obj: WorkshopObject, row: Row, actor: Principal): Promise<void> {
    // A node that stopped heartbeating: its workshops are NodeUnreachable, as the API shows them.
    const unreachable = this.relay !== undefined && row.node_id !== this.identity && !this.relay.isLive(row.node_id);
    const phase: WorkshopStatus = unreachable ? 'NodeUnreachable' : row.status;
    const reason = unreachable ? `its node ${row.node_id} has missed its heartbeats` : (row.status_reason ?? '');
    const sims =
      phase === 'Running'
        ? (
            await this.onNode(
              row,
              actor,
              async () => ({ items: await this.workshops.listSimulators(row.id, actor) }),
              'GET',
              `/v1/workshops/${row.id}/simulators`,
            )
          ).items.map((v: SimulatorView) => ({
            name: v.name,
            type: v.type,
            status: v.status,
            ...(v.statusReason ? { reason: v.statusReason } : {}),
          }))
        : (obj.status?.simulators ?? []);
    const want = (s: WorkshopStatusBlock): void => {
      s.workshopId = row.id;
      s.phase = phase;
      s.observedGeneration = obj.metadata.generation;
      s.simulators = sims;
      setCondition(s, 'Ready', phase === 'Running' ? 'True' : 'False', phase, reason, obj);
    };
    const probe: WorkshopStatusBlock = structuredClone(obj.status ?? {});
    want(probe);
    if (JSON.stringify(probe) === JSON.stringify(obj.status ?? {})) return;
    await this.writeStatus(obj.metadata.name!, want);
  }

  /** spec.simulators against what the controller started from it: the new ones started live, the removed ones stopped. */
  private async syncSimulators(obj: WorkshopObject, row: Row, actor: Principal): Promise<void> {
    if (row.status !== 'Running' || !obj.status || (this.relay && row.node_id !== this.identity && !this.relay.isLive(row.node_id))) return;
    const wanted = new Map((obj.spec.simulators ?? []).map((s) => [simulatorName(toRequest(s)), toRequest(s)]));
    const applied = obj.status.appliedSimulators ?? [];
    const add = [...wanted].filter(([n]) => !applied.includes(n));
    const remove = applied.filter((n) => !wanted.has(n));
    if (add.length === 0 && remove.length === 0) return;
    const name = obj.metadata.name!;
    this.background(row.id, async () => {
      const done = new Set(applied);
      const errors: string[] = [];
      for (const [n, req] of add) {
        const key = `${obj.metadata.uid}/${obj.metadata.generation}/simulator ${n}`;
        if (this.refused.has(key)) continue;
        try {
          await this.onNode(
            row,
            actor,
            () => this.workshops.requestSimulator(row.id, req, actor),
            'POST',
            `/v1/workshops/${row.id}/simulators`,
            req,
          );
          done.add(n);
        } catch (err) {
          this.refused.add(key);
          errors.push(`${n}: ${(err as Error).message}`);
        }
      }
      for (const n of remove) {
        try {
          await this.onNode(
            row,
            actor,
            () => this.workshops.stopSimulator(row.id, n, actor),
            'POST',
            `/v1/workshops/${row.id}/simulators/${encodeURIComponent(n)}/stop`,
          );
        } catch (err) {
          // Already gone (stopped by hand, never started): nothing to stop.
          if ((err as { code?: string }).code !== 'NOT_FOUND') errors.push(`${n}: ${(err as Error).message}`);
        }
        done.delete(n);
      }
      await this.writeStatus(name, (s) => {
        s.appliedSimulators = [...done];
        if (errors.length > 0) setCondition(s, 'Simulators', 'False', 'SimulatorRefused', errors.join('; '), obj);
        else setCondition(s, 'Simulators', 'True', 'Applied', '', obj);
      });
    });
  }

  /** `local` when the workshop runs on this node, else the same through the API of its node. */
  private async onNode<T>(row: Row, actor: Principal, local: () => Promise<T>, method: string, path: string, body?: unknown): Promise<T> {
    if (row.node_id === this.identity || !this.relay) return local();
    return this.relay.call<T>(row.node_id, actor, { what: `workshop ${row.id}`, method, path, body });
  }

  private async writeStatus(name: string, change: (s: WorkshopStatusBlock) => void): Promise<void> {
    await updateWithRetry<WorkshopObject>(this.client, `${this.base}/${name}/status`, (o) => {
      const before = JSON.stringify(o.status ?? {});
      o.status = structuredClone(o.status ?? {});
      change(o.status);
      return JSON.stringify(o.status) !== before;
    });
  }

  private async dropFinalizer(name: string): Promise<void> {
    await updateWithRetry<WorkshopObject>(this.client, `${this.base}/${name}`, (o) => {
      const f = (o.metadata.finalizers as string[] | undefined) ?? [];
      if (!f.includes(FINALIZER)) return false;
      o.metadata.finalizers = f.filter((x) => x !== FINALIZER);
      return true;
    });
  }
}

function toRequest(s: SimulatorSpec): SimulatorRequest {
  return {
    ...(s.type ? { type: s.type, name: s.name } : { name: s.name }),
    ...(s.version ? { version: s.version } : {}),
    ...(s.env ? { env: s.env } : {}),
    ...(s.services ? { services: s.services } : {}),
    ...(s.stubsDirectory ? { stubsDirectory: s.stubsDirectory } : {}),
  };
}

/** Sets a condition; its transition time changes only when its status does. */
function setCondition(
  s: WorkshopStatusBlock,
  type: string,
  status: Condition['status'],
  reason: string,
  message: string | undefined,
  obj: WorkshopObject,
): void {
  const conditions = s.conditions ?? [];
  const was = conditions.find((c) => c.type === type);
  const next: Condition = {
    type,
    status,
    reason,
    message: message ?? '',
    observedGeneration: obj.metadata.generation,
    lastTransitionTime: was && was.status === status ? was.lastTransitionTime : new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
  };
  // In place: the list keeps its order, so an unchanged status compares equal and is not written.
  s.conditions = was ? conditions.map((c) => (c === was ? next : c)) : [...conditions, next];
}

/**
 * Starts the controller when the server is configured for it (ATELIER_K8S_WORKSHOPS_*); it
 * leads, or waits for the lease, in the background. `identity`: this node's id (the lease's holder).
 */
export function startWorkshopResource(
  pool: Pool,
  workshops: WorkshopService,
  config: WorkshopResourceConfig,
  identity: string,
  log: Log,
  relay?: NodeRelay,
): WorkshopResourceController {
  let connection: KubeConnection;
  if (config.kubeconfig === 'in-cluster') {
    if (!config.inCluster)
      throw new Error(
        'ATELIER_K8S_KUBECONFIG=in-cluster needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set in every pod): run the server in a pod, or give a kubeconfig file',
      );
    connection = inClusterConnection(config.inCluster);
    // The pod's own namespace, where the chart lets the server hold leases.
    config = { ...config, leaseNamespace: config.leaseNamespace ?? readFileSync(`${SERVICE_ACCOUNT}/namespace`, 'utf8').trim() };
  } else connection = readKubeconfig(config.kubeconfig);
  const controller = new WorkshopResourceController(pool, workshops, new KubeClient(connection), config, identity, log, relay);
  controller.start();
  return controller;
}
