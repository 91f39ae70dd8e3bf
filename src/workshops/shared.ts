/**
 * What the rooms of the workshop service share (lifecycle.ts, deathWatch.ts, exec.ts, files.ts):
 * the row and its authorisation, the per-workshop lock and the commands running in each workshop.
 */
import { type Readable } from 'node:stream';
import {
  AtelierError,
  isWorkshopId,
  type ExecRequest,
  type Workshop,
  type WorkshopDisk,
  type WorkshopEgressEntry,
  type WorkshopStatus,
} from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import { checkWorkshopAccess, type Principal, type WorkshopAction } from '../identity/index.js';
import { type SandboxHandle } from '../sandbox/index.js';
import { type CredentialBroker, type CredentialEntry, type EgressJournal, type EgressProxy } from '../egress/index.js';
import type { WorkshopDriver } from './driver.js';
import type { InternalNetwork } from './internal.js';
import { type SimulatorManager, type WorkshopContext } from './simulators.js';
import { spendOfRow } from './spend.js';
import type { CredentialPolicies } from './credentialPolicy.js';

export interface WorkshopRow {
  id: string;
  name: string;
  owner_id: string | null;
  tenant_id: string;
  node_id: string;
  /** Its disk figures as its node last published them with its heartbeat (migration 031); null before the first. */
  disk: WorkshopDisk | null;
  status: WorkshopStatus;
  status_reason: string | null;
  repo: string;
  uid: number;
  cpus: number;
  memory_bytes: string;
  pids: number;
  budget_usd: string | null;
  /** The LLM gateway's totals (migration 024). */
  llm_spent_usd: string;
  llm_requests: string;
  llm_requests_unreported: string;
  llm_input_tokens: string;
  llm_output_tokens: string;
  env: Record<string, string>;
  forward_ports: number[];
  /**
   * `approved`: entries added by approved ALLOWLIST_EXPANSION requests (kept across restarts);
   * `origins`: for each of them, the request that added it, who decided it and when.
   */
  egress: {
    allow?: string[];
    deny?: string[];
    askHoldSeconds?: number;
    approved?: string[];
    origins?: Record<string, ApprovalOrigin>;
    credentials?: CredentialEntry[];
  };
  warnings: string[];
  approval_commands: string[];
  sandbox: SandboxHandle | null;
  agent_token: string | null;
  /** When its first build finished (null: it never did, so a Failed one has nothing to resume). */
  built_at: Date | null;
  /** Why it runs on its node (placement at create). */
  placement: string | null;
  created_at: Date;
  updated_at: Date;
}

/** What the service knows of the installation's nodes (the server's node registry). */
export interface NodeDirectory {
  /** How long a node may be silent before this one takes it for unreachable (ATELIER_NODE_DEAD_AFTER). */
  readonly deadAfterMs: number;
  /** Whether the node answered its heartbeats lately (this node always has). */
  isLive(nodeId: string): boolean;
  /** Its name, address, last heartbeat, and when it was removed from the installation (null: it was not). */
  describe(nodeId: string): { name: string; address: string; heartbeatAt: string | null; removedAt: string | null };
}

export interface ServiceOptions {
  /** The tenants' credential policies (bindings every new workshop gets, hosts none may bind). */
  credentialPolicies?: CredentialPolicies;
  nodeId: string;
  /** The installation's nodes; without it, every workshop is taken for this node's (tests of one node). */
  nodes?: NodeDirectory;
  allowRepoRoots: string[];
  defaults: { cpus: number; memory: string; pids: number };
  /** Disk quotas: the default a create gets and the most it may ask for (bytes). */
  disk?: { defaultBytes: number; maxBytes: number };
  uidBase: number;
  log: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void; error(obj: object, msg?: string): void };
  egress: EgressWiring;
  /** The workshops' `.atelier.internal` names and their simulators. */
  internal: InternalNetwork;
  simulators: SimulatorManager;
  /** Seals the workshop's own agent token at rest (the server's master key). */
  sealer: { encrypt(plain: string, context: string): string; decrypt(sealed: string, context: string): Buffer };
  /**
   * Called before an exec in a workshop whose atelier.yaml lists `approvals.commands`: resolves
   * when the command may run (no pattern matches, or a human approved it), throws otherwise.
   */
  execGate?: ExecGate;
  /** Variables of granted secrets (approved SECRET_REQUESTs) for new execs of a workshop. */
  secretEnv?: (workshopId: string) => Promise<Record<string, string>>;
  /**
   * Called once a workshop is marked Dead (its sandbox died) or Failed, with the reason as a
   * sentence ("the workshop's sandbox died: …"): nothing waits for its pending approvals any more.
   */
  onEnded?: (workshopId: string, reason: string) => Promise<unknown>;
}

export type ExecGate = (
  workshopId: string,
  patterns: string[],
  req: ExecRequest,
  actor: Principal,
  opts: { onApproval?: (approvalId: string) => void; signal?: AbortSignal },
) => Promise<void>;

/** The egress proxy every workshop's traffic goes through, and the platform's part of each policy. */
export interface EgressWiring {
  proxy: EgressProxy;
  journal: EgressJournal;
  /** The platform allowlist (admin), before each project's own entries. */
  defaults: string[];
  /** Private/loopback ranges the admin lets workshops reach. */
  allowRanges: string[];
  /** Injects credentials bound to hosts (atelier.yaml `egress.credentials`); absent in some tests. */
  broker?: CredentialBroker;
  /**
   * Set when the LLM gateway has providers: every workshop then trusts the broker's authority and
   * gets `env` (placeholder keys the SDKs insist on, replaced on the way out; base URLs).
   */
  llmGateway?: { env: Record<string, string>; bindingFor(host: string, port: number): unknown };
}

/** Who asks, and for what: checked against the workshop's tenant and owner. */
export interface Access {
  actor: Principal;
  action: WorkshopAction;
}

/** A command running in a workshop. `done` settles when it exits. */
export interface RunningExec {
  /** Host pid of the process group leader. */
  pid: number;
  stdout: Readable;
  stderr: Readable;
  done: Promise<{ exitCode: number; signal: string | null }>;
  kill(): void;
}

export const DEFAULT_ASK_HOLD_SECONDS = 30;

/** The approved request an egress entry came from (stored with the entry, see migration 020). */
export interface ApprovalOrigin {
  requestId: string | null;
  decidedBy: string | null;
  decidedAt: string | null;
}

/**
 * The live egress policy of a workshop, as its proxy applies it (lifecycle.ts `egressPolicy`:
 * the same lists in the same order), every entry with where it came from.
 */
export function egressPolicyView(r: WorkshopRow, platform: Pick<EgressWiring, 'defaults' | 'allowRanges'>): WorkshopEgressEntry[] {
  const origins = r.egress.origins ?? {};
  return [
    ...platform.defaults.map((entry) => ({ rule: 'allow' as const, entry, origin: 'platform' as const, approval: null })),
    ...(r.egress.allow ?? []).map((entry) => ({ rule: 'allow' as const, entry, origin: 'project' as const, approval: null })),
    ...(r.egress.approved ?? []).map((entry) => ({
      rule: 'allow' as const,
      entry,
      origin: 'approval' as const,
      approval: origins[entry] ?? { requestId: null, decidedBy: null, decidedAt: null },
    })),
    ...(r.egress.deny ?? []).map((entry) => ({ rule: 'deny' as const, entry, origin: 'project' as const, approval: null })),
    ...platform.allowRanges.map((entry) => ({ rule: 'allowRange' as const, entry, origin: 'platform' as const, approval: null })),
  ];
}

export function toWorkshop(r: WorkshopRow, platform: Pick<EgressWiring, 'defaults' | 'allowRanges'>, nodes?: NodeDirectory): Workshop {
  const node = nodes?.describe(r.node_id);
  // Shown, never stored: the row keeps its status for when the node is back.
  const unreachable = nodes !== undefined && !nodes.isLive(r.node_id);
  return {
    id: r.id,
    name: r.name,
    status: unreachable ? 'NodeUnreachable' : r.status,
    statusReason: !unreachable
      ? r.status_reason
      : node!.removedAt !== null
        ? `its node ${node!.name} was removed from the installation on ${node!.removedAt} (silent since ${node!.heartbeatAt}); it was ${r.status}: ` +
          `delete it (\`atelier workshops delete ${r.id}\`) to forget it, or start ${node!.name} again with its data dir to have it back as it was`
        : `its node ${node!.name} has missed its heartbeats since ${node!.heartbeatAt ?? 'it joined'} (silent for more than ${nodes.deadAfterMs / 1000} s); ` +
          `it was ${r.status} and comes back as it was when the node returns`,
    repo: r.repo,
    ownerId: r.owner_id,
    limits: { cpus: r.cpus, memoryBytes: Number(r.memory_bytes), pids: r.pids },
    budgetUsd: r.budget_usd === null ? null : Number(r.budget_usd),
    llm: spendOfRow(r),
    forwardPorts: r.forward_ports,
    egress: {
      allow: r.egress.allow ?? [],
      deny: r.egress.deny ?? [],
      askHoldSeconds: r.egress.askHoldSeconds ?? DEFAULT_ASK_HOLD_SECONDS,
      policy: egressPolicyView(r, platform),
    },
    warnings: r.warnings,
    node: node?.name ?? r.node_id,
    placement: r.placement,
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

/** The state every room of the service works on; one per `WorkshopService`. */
export class WorkshopShared {
  private readonly locks = new Map<string, Promise<unknown>>();
  /** The commands this server process started and still waits for, per workshop. */
  readonly running = new Map<string, Set<RunningExec>>();

  constructor(
    readonly pool: Pool,
    readonly driver: WorkshopDriver,
    readonly opts: ServiceOptions,
    /** A sandbox found gone by `runnable` (before the death watch's next look): recorded Dead. */
    private readonly onLost: (id: string) => void,
  ) {}

  /** Serialises lifecycle operations on one workshop within this server. */
  async locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.locks.set(id, tail);
    try {
      return await next;
    } finally {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    }
  }

  /**
   * The workshop's row. With `access`, the caller's right to do `action` on it is checked first
   * (another tenant's workshop, or another workshop than an agent token's, is "not found").
   */
  async row(id: string, access?: Access, anywhere = false): Promise<WorkshopRow> {
    if (!isWorkshopId(id))
      throw new AtelierError('WORKSHOP_NOT_FOUND', `workshop ${id} does not exist: run \`atelier workshops list\` to see yours`, { id });
    const [row] = await queryRows<WorkshopRow>(this.pool, 'SELECT * FROM workshops WHERE id = $1', [id]);
    if (!row)
      throw new AtelierError(
        'WORKSHOP_NOT_FOUND',
        `workshop ${id} does not exist (or was deleted): run \`atelier workshops list\` to see yours`,
        { id },
      );
    if (access) checkWorkshopAccess(access.actor, { id: row.id, tenantId: row.tenant_id, ownerId: row.owner_id }, access.action);
    // Reached only when a request was not relayed to the workshop's node (src/server/relay.ts).
    if (!anywhere && row.node_id !== this.opts.nodeId) {
      const node = this.opts.nodes?.describe(row.node_id).name ?? row.node_id;
      throw new AtelierError('UNAVAILABLE', `workshop ${id} runs on node ${node}: ask it through the API (any node relays it)`, {
        id,
        node,
      });
    }
    return row;
  }

  async setStatus(id: string, status: WorkshopStatus, reason: string | null, sandbox?: SandboxHandle | null): Promise<WorkshopRow> {
    const rows =
      sandbox === undefined
        ? await queryRows<WorkshopRow>(
            this.pool,
            'UPDATE workshops SET status = $2, status_reason = $3, updated_at = now() WHERE id = $1 RETURNING *',
            [id, status, reason],
          )
        : await queryRows<WorkshopRow>(
            this.pool,
            'UPDATE workshops SET status = $2, status_reason = $3, sandbox = $4, updated_at = now() WHERE id = $1 RETURNING *',
            [id, status, reason, sandbox === null ? null : JSON.stringify(sandbox)],
          );
    if (!rows[0]) throw new AtelierError('WORKSHOP_NOT_FOUND', `workshop ${id} was deleted meanwhile`, { id });
    return rows[0];
  }

  /** The workshop as the API shows it (its live egress policy includes this server's part). */
  view(row: WorkshopRow): Workshop {
    return toWorkshop(row, this.opts.egress, this.opts.nodes);
  }

  context(row: WorkshopRow, sandbox: SandboxHandle): WorkshopContext {
    return { id: row.id, hostname: row.name, uid: row.uid, sandbox, layout: this.driver.layout(row.id) };
  }

  /** The workshop's row if it runs (`known`: a row just read with the same access check). */
  async runnable(id: string, access: Access | undefined, known?: WorkshopRow): Promise<WorkshopRow & { sandbox: SandboxHandle }> {
    const row = known ?? (await this.row(id, access));
    if (row.status === 'Suspended')
      throw new AtelierError('WORKSHOP_SUSPENDED', `workshop ${id} is suspended: run \`atelier workshops resume ${id}\``, { id });
    if (row.status !== 'Running' || !row.sandbox) {
      throw new AtelierError(
        'WORKSHOP_NOT_RUNNING',
        `workshop ${id} is ${row.status}${row.status_reason ? ` (${row.status_reason})` : ''}`,
        { id, status: row.status },
      );
    }
    if (!this.driver.alive(row.sandbox)) {
      // Found before the watcher's next look: recorded now (outside this caller's lock).
      setImmediate(() => this.onLost(id));
      throw new AtelierError(
        'WORKSHOP_NOT_RUNNING',
        `workshop ${id} died (its sandbox's processes are gone): run \`atelier workshops resume ${id}\` to start it again, files kept`,
        { id, status: 'Dead' },
      );
    }
    return row as WorkshopRow & { sandbox: SandboxHandle };
  }
}
