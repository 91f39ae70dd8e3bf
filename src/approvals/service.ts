import { EventEmitter } from 'node:events';
import { AtelierError, describeZodError, type ApprovalAuditEntry } from '../core/index.js';
import { listenChannel, queryRows, withTransaction, type NotificationBus, type Pool, type PoolClient } from '../db/index.js';
import { verifyAuditChain, type AuditVerification } from './auditChain.js';
import { EffectRunner } from './effects.js';
import { SELECT, toApproval, type Row } from './rows.js';
import {
  APPROVAL_CATEGORIES,
  APPROVAL_STATUSES,
  PAYLOADS,
  type ApprovalActor,
  type ApprovalCategory,
  type ApprovalChannel,
  type ApprovalEvent,
  type ApprovalRequest,
  type ApprovalStatus,
  type CreateApprovalRequest,
  type DecideApprovalRequest,
} from './types.js';

const CHANNEL = 'atelier_approvals';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface WorkshopRef {
  id: string;
  tenant_id: string;
  owner_id: string | null;
  status: string;
}

/** What a category does on this server: checks its payload at creation, applies its effect once approved. */
export interface CategoryHandler {
  /** Checks (and may normalise) a payload for this workshop; throws an AtelierError that says what is wrong. */
  prepare?(workshopId: string, payload: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** False when another server must apply this request's effect (its workshop runs there). */
  local?(approval: ApprovalRequest): Promise<boolean>;
  /**
   * Applies an approved request's effect; must be idempotent (it runs again if the server died
   * after applying it but before recording it).
   */
  apply?(approval: ApprovalRequest): Promise<void>;
}

/** Where a call came from, for the audit. */
export interface CallOrigin {
  channel: ApprovalChannel;
  ip: string | null;
}

export interface ApprovalServiceOptions {
  /** TTL in seconds per category (ATELIER_APPROVAL_TTL). */
  ttls: Record<ApprovalCategory, number>;
  /** Connection string for the LISTEN connection (the pool's database). */
  databaseUrl: string;
  log: { warn(obj: object, msg?: string): void; error(obj: object, msg?: string): void };
  sweepIntervalMs?: number;
  /**
   * ATELIER_APPROVALS_SELF_CONFIRM=sole-maintainer: a workshop's owner who is the only person of
   * its tenant able to decide (no other active maintainer or admin) may confirm a request they
   * filed by their own hand (their login or personal token; never one an agent token filed).
   * Off by default: nobody decides what they filed.
   */
  selfConfirm?: 'off' | 'sole-maintainer';
  /** Whether this node runs the installation's periodic jobs (src/db/leader.ts); always, without it. */
  isLeader?: () => boolean;
}

/**
 * SQL over `h` (hitl_requests) and `c` (its context), `user` the deciding user's parameter: the request was filed by that user's own hand (not an agent token), they own its
 * workshop, and nobody else of the tenant could decide it (no other active maintainer or admin).
 */
const soleMaintainerSql = (user: string): string => `(c.requester_kind = 'user' AND c.requester_user_id = ${user}
  AND EXISTS (SELECT 1 FROM workshops w WHERE w.id = h.workshop_id AND w.owner_id = ${user})
  AND NOT EXISTS (SELECT 1 FROM memberships m JOIN users u ON u.id = m.user_id
                   WHERE m.tenant_id = c.tenant_id AND m.user_id <> ${user} AND m.role IN ('maintainer', 'admin')
                     AND u.disabled_at IS NULL))`;

/** The decision_reason prefix of a request its own requester confirmed (ATELIER_APPROVALS_SELF_CONFIRM). */
export const SELF_CONFIRMED = "self-confirmed by the workshop's only maintainer (ATELIER_APPROVALS_SELF_CONFIRM)";

type Scoped = { event: ApprovalEvent; tenantId: string };

/**
 * Approval requests: filed by an agent (or a user, or the egress proxy), decided once by a
 * person with the right, expired by the database clock. Waiters across replicas are woken by
 * LISTEN/NOTIFY; every creation, decision and expiry is audited in the same transaction.
 */
export class ApprovalService {
  /** Waiters per request: woken with the row as read after a notification (or with nothing: read it again). */
  private readonly waiters = new Map<string, Set<(row?: Row) => void>>();
  private readonly handlers = new Map<ApprovalCategory, CategoryHandler>();
  /** Every event of every replica (from NOTIFY): the WebSocket stream listens here. */
  readonly events = new EventEmitter();
  /** Events this server caused (Slack and terminal notifiers listen here, so one replica sends them). */
  readonly localEvents = new EventEmitter();
  private bus: NotificationBus | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly effects: EffectRunner;

  constructor(
    private readonly pool: Pool,
    private readonly opts: ApprovalServiceOptions,
  ) {
    this.events.setMaxListeners(0);
    this.localEvents.setMaxListeners(0);
    this.effects = new EffectRunner(pool, this.handlers, opts.log);
  }

  /** Wires a category to its effect on this server. A category without a handler cannot be requested. */
  register(category: ApprovalCategory, handler: CategoryHandler): void {
    this.handlers.set(category, handler);
  }

  /**
   * Starts listening for other replicas' events and the expiry sweeper. Effects wait for
   * resumeEffects(), once the server's workshops are recovered.
   */
  async start(): Promise<void> {
    this.bus = listenChannel(this.opts.databaseUrl, CHANNEL, {
      onNotify: (payload) => this.onNotify(payload),
      onResync: () => {
        // Notifications may have been lost while reconnecting: every waiter re-reads its request.
        for (const set of this.waiters.values()) for (const wake of set) wake();
        if (this.effects.started) void this.effects.applyPending();
      },
      onError: (err) => this.opts.log.warn({ err: err.message }, 'approvals: notification connection lost; reconnecting'),
    });
    await this.bus.ready;
    const interval = this.opts.sweepIntervalMs ?? 1000;
    this.sweeper = setInterval(() => {
      // One node of the installation expires requests; every node's waiters hear of it.
      if (this.opts.isLeader?.() === false) return;
      this.expireDue().catch((err: unknown) => this.opts.log.warn({ err: String(err) }, 'approvals: expiry sweep failed'));
    }, interval);
    this.sweeper.unref();
    if (this.opts.isLeader?.() !== false) await this.expireDue().catch(() => undefined);
  }

  /**
   * Applies the effects a previous run left undone (a decision committed, then the process died
   * before its effect was applied or recorded), then every new one as it is decided. Called once
   * the workshops this server runs are recovered: before, an effect could find its sandbox down,
   * or run a command that the recovery kills as an orphan.
   */
  async resumeEffects(): Promise<void> {
    await this.effects.resume();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.effects.close();
    if (this.sweeper) clearInterval(this.sweeper);
    for (const set of this.waiters.values()) for (const wake of set) wake();
    await this.bus?.close();
  }

  // ---- notifications ---------------------------------------------------------------------

  private onNotify(payload: string): void {
    let msg: { id?: unknown; type?: unknown };
    try {
      msg = JSON.parse(payload) as typeof msg;
    } catch {
      return;
    }
    if (typeof msg.id !== 'string') return;
    const id = msg.id;
    const type = msg.type;
    const event = type === 'created' || type === 'decided' || type === 'expired';
    if (!event && !this.waiters.has(id)) return;
    // One read after the notification serves every waiter of this request and the event stream.
    // A request's notifications are read one after the other, so its events keep their order
    // (created before decided), and a `created` event shows the request as it was filed even when
    // the read comes after its decision.
    const read = (this.reads.get(id) ?? Promise.resolve())
      .then(() => this.rowById(id))
      .then((row) => {
        for (const wake of this.waiters.get(id) ?? []) wake(row);
        if (!row || !event) return;
        const current = toApproval(row);
        const approval: ApprovalRequest =
          type === 'created' && current.status !== 'PENDING'
            ? { ...current, status: 'PENDING', decidedBy: null, decisionReason: null, decidedAt: null }
            : current;
        this.events.emit('event', { event: { type, approval }, tenantId: row.tenant_id } satisfies Scoped);
        if (current.status === 'APPROVED' && current.effect.appliedAt === null) void this.applyEffect(current);
      })
      .catch(() => {
        for (const wake of this.waiters.get(id) ?? []) wake();
      });
    this.reads.set(id, read);
    void read.then(() => {
      if (this.reads.get(id) === read) this.reads.delete(id);
    });
  }

  /** The read in progress of each request's last notification (see onNotify). */
  private readonly reads = new Map<string, Promise<void>>();

  private subscribe(id: string, wake: (row?: Row) => void): () => void {
    let set = this.waiters.get(id);
    if (!set) this.waiters.set(id, (set = new Set()));
    set.add(wake);
    return () => {
      set.delete(wake);
      if (set.size === 0) this.waiters.delete(id);
    };
  }

  // ---- rights ----------------------------------------------------------------------------

  private notFound(id: string): AtelierError {
    return new AtelierError('NOT_FOUND', `approval request ${id} does not exist: run \`atelier approvals list\` to see yours`, { id });
  }

  private visible(actor: ApprovalActor, row: { tenant_id: string; workshop_id: string }): boolean {
    if (row.tenant_id !== actor.tenantId) return false;
    return actor.kind !== 'agent' || row.workshop_id === actor.workshopId;
  }

  /** Only the workshop's owner or a maintainer/admin of its tenant; never the requester; never an agent token. */
  private checkDecider(actor: ApprovalActor, row: Row, ownerId: string | null, selfConfirmable = false): void {
    if (actor.kind === 'agent')
      throw new AtelierError('PERMISSION_DENIED', 'an agent token can never decide an approval: a person must, with `atelier approvals`');
    if (row.requester_user_id !== null && row.requester_user_id === actor.userId && !selfConfirmable)
      throw new AtelierError(
        'PERMISSION_DENIED',
        this.opts.selfConfirm === 'sole-maintainer'
          ? 'you filed this request: someone else (the owner or a maintainer) must decide it; only the owner who is the sole maintainer of the tenant may confirm what they filed themselves, never what an agent filed'
          : 'you filed this request: someone else (the owner or a maintainer) must decide it (alone on this server? an admin can set ATELIER_APPROVALS_SELF_CONFIRM=sole-maintainer: see docs/approvals.md)',
        { id: row.id },
      );
    if (actor.role === 'maintainer' || actor.role === 'admin') return;
    if (actor.role === 'member' && ownerId !== null && ownerId === actor.userId) return;
    throw new AtelierError(
      'PERMISSION_DENIED',
      `only the owner of workshop ${row.workshop_id} or a maintainer of its tenant may decide this request`,
      { id: row.id },
    );
  }

  /** Whether `actor` may confirm `row` although they filed it (ATELIER_APPROVALS_SELF_CONFIRM). */
  private async selfConfirmable(actor: ApprovalActor, row: Row): Promise<boolean> {
    if (this.opts.selfConfirm !== 'sole-maintainer' || actor.kind !== 'user') return false;
    const r = await queryRows<{ ok: boolean }>(
      this.pool,
      `SELECT ${soleMaintainerSql('$2')} AS ok FROM hitl_requests h JOIN hitl_request_context c ON c.request_id = h.id
        WHERE h.id = $1 AND c.requester_user_id = $2 AND c.tenant_id = $3`,
      [row.id, actor.userId, actor.tenantId],
    );
    return r[0]?.ok === true;
  }

  private async workshop(id: string, client: Pool | PoolClient = this.pool): Promise<WorkshopRef | undefined> {
    return (await queryRows<WorkshopRef>(client, 'SELECT id, tenant_id, owner_id, status FROM workshops WHERE id = $1', [id]))[0];
  }

  // ---- reading ---------------------------------------------------------------------------

  private async rowById(id: string, client: Pool | PoolClient = this.pool): Promise<Row | undefined> {
    if (!UUID.test(id)) return undefined;
    return (await queryRows<Row>(client, `${SELECT} WHERE r.id = $1`, [id]))[0];
  }

  /** A row as it stands now: expired first if its time has passed (the database clock decides). */
  private async current(id: string): Promise<Row | undefined> {
    const row = await this.rowById(id);
    if (row?.due) {
      await this.expireDue([id]);
      return this.rowById(id);
    }
    return row;
  }

  /** One request; `actor` null for the platform itself (the egress proxy's hold). */
  async get(id: string, actor: ApprovalActor | null): Promise<ApprovalRequest> {
    const row = await this.current(id);
    if (!row || (actor && !this.visible(actor, row))) throw this.notFound(id);
    return toApproval(row);
  }

  /** A PENDING request of this workshop and category whose payload contains `match` (so a retried request is filed once). */
  async findPending(workshopId: string, category: ApprovalCategory, match: Record<string, unknown>): Promise<ApprovalRequest | undefined> {
    const [row] = await queryRows<Row>(
      this.pool,
      `${SELECT} WHERE r.workshop_id = $1 AND r.category = $2 AND r.status = 'PENDING' AND r.expires_at > now() AND r.payload @> $3::jsonb
        ORDER BY r.created_at DESC LIMIT 1`,
      [workshopId, category, JSON.stringify(match)],
    );
    return row ? toApproval(row) : undefined;
  }

  async list(
    actor: ApprovalActor,
    filter: { status?: ApprovalStatus; workshopId?: string; category?: ApprovalCategory; limit?: number; concerning?: boolean },
  ): Promise<ApprovalRequest[]> {
    await this.expireDue();
    const where = ['c.tenant_id = $1'];
    const params: unknown[] = [actor.tenantId];
    const add = (sql: string, v: unknown): void => {
      params.push(v);
      where.push(sql.replace('?', `$${params.length}`));
    };
    if (actor.kind === 'agent') add('r.workshop_id = ?', actor.workshopId);
    if (filter.workshopId !== undefined) add('r.workshop_id = ?', filter.workshopId);
    if (filter.status !== undefined) add('r.status = ?', filter.status);
    if (filter.category !== undefined) add('r.category = ?', filter.category);
    if (filter.concerning && !concernsEveryWorkshop(actor))
      add('EXISTS (SELECT 1 FROM workshops w WHERE w.id = r.workshop_id AND w.owner_id = ?)', actor.userId);
    params.push(filter.limit ?? 100);
    const rows = await queryRows<Row>(
      this.pool,
      `${SELECT} WHERE ${where.join(' AND ')} ORDER BY r.created_at DESC LIMIT $${params.length}`,
      params,
    );
    return rows.map(toApproval);
  }

  /**
   * A filter of events down to those that concern `actor` (see `concernsEveryWorkshop`): the
   * owner of each workshop is read once, then kept (a workshop's owner never changes).
   */
  concerning(actor: ApprovalActor): (approval: ApprovalRequest) => Promise<boolean> {
    if (concernsEveryWorkshop(actor)) return async () => true;
    const owned = new Map<string, Promise<boolean>>();
    return (approval) => {
      let known = owned.get(approval.workshopId);
      if (!known) {
        known = this.workshop(approval.workshopId).then(
          (w) => w?.owner_id === actor.userId,
          () => (owned.delete(approval.workshopId), false),
        );
        owned.set(approval.workshopId, known);
      }
      return known;
    };
  }

  /** The audit rows of one request, oldest first: what happened, who, through which channel, from which address, when. */
  async auditTrail(id: string, actor: ApprovalActor): Promise<ApprovalAuditEntry[]> {
    await this.get(id, actor);
    const rows = await queryRows<{
      seq: string;
      at: Date;
      event: ApprovalAuditEntry['event'];
      subject: string;
      channel: ApprovalAuditEntry['channel'];
      ip: string | null;
    }>(this.pool, 'SELECT seq, at, event, subject, channel, ip FROM hitl_audit WHERE request_id = $1 ORDER BY seq', [id]);
    return rows.map((r) => ({
      seq: Number(r.seq),
      at: r.at.toISOString(),
      event: r.event,
      subject: r.subject,
      channel: r.channel,
      ip: r.ip,
    }));
  }

  // ---- writing ---------------------------------------------------------------------------

  private async audit(
    c: PoolClient,
    ids: string[],
    event: 'CREATED' | 'APPROVED' | 'REJECTED' | 'EXPIRED',
    subject: string,
    origin: CallOrigin,
  ): Promise<void> {
    await c.query(
      `INSERT INTO hitl_audit (seq, request_id, event, subject, channel, ip, request_hash, prev_hash, hash)
       SELECT 0, h.id, $2, $3, $4, $5, hitl_request_digest(h), '', '' FROM hitl_requests h WHERE h.id = ANY($1::uuid[]) ORDER BY h.id`,
      [ids, event, subject, origin.channel, origin.ip],
    );
    for (const id of ids) await c.query('SELECT pg_notify($1, $2)', [CHANNEL, JSON.stringify({ id, type: eventType(event) })]);
  }

  /**
   * Files a request for a workshop. The caller must be allowed to operate the workshop (its
   * agent token, its owner, a maintainer). The payload is checked per category.
   */
  async create(workshopId: string, req: CreateApprovalRequest, actor: ApprovalActor, origin: CallOrigin): Promise<ApprovalRequest> {
    const ws = await this.workshop(workshopId);
    const hidden =
      !ws || ws.tenant_id !== actor.tenantId || (actor.kind === 'agent' && ws.id !== actor.workshopId) || ws.status === 'Deleting';
    if (hidden)
      throw new AtelierError(
        'WORKSHOP_NOT_FOUND',
        `workshop ${workshopId} does not exist (or was deleted): run \`atelier workshops list\``,
        {
          id: workshopId,
        },
      );
    if (actor.role === 'viewer') throw new AtelierError('PERMISSION_DENIED', 'the viewer role cannot file approval requests');
    if (actor.kind === 'user' && actor.role === 'member' && ws.owner_id !== actor.userId)
      throw new AtelierError(
        'PERMISSION_DENIED',
        `workshop ${workshopId} belongs to someone else: only its owner or a maintainer may ask for it`,
      );
    return this.file(
      ws,
      req,
      { kind: actor.kind, userId: actor.kind === 'user' ? actor.userId : null, name: requesterName(actor) },
      origin,
    );
  }

  /** Files a request on behalf of the platform itself (the egress proxy's ask hook), for a workshop it serves. */
  async createForWorkshop(workshopId: string, req: CreateApprovalRequest, requestedBy: string): Promise<ApprovalRequest> {
    const ws = await this.workshop(workshopId);
    if (!ws) throw new AtelierError('WORKSHOP_NOT_FOUND', `workshop ${workshopId} does not exist`, { id: workshopId });
    return this.file(ws, req, { kind: 'agent', userId: null, name: requestedBy }, { channel: 'system', ip: null });
  }

  private async file(
    ws: WorkshopRef,
    req: CreateApprovalRequest,
    requester: { kind: 'user' | 'agent'; userId: string | null; name: string },
    origin: CallOrigin,
  ): Promise<ApprovalRequest> {
    const handler = this.handlers.get(req.category);
    if (!handler) throw new AtelierError('UNSUPPORTED', `this server does not handle ${req.category} requests`, { field: 'category' });
    const checked = PAYLOADS[req.category].safeParse(req.payload);
    if (!checked.success) {
      const { message, field } = describeZodError(checked.error);
      throw new AtelierError('INVALID_ARGUMENT', `payload: ${message}`, { field: `payload${field ? `.${field}` : ''}` });
    }
    let payload = checked.data as Record<string, unknown>;
    if (handler.prepare) payload = await handler.prepare(ws.id, payload);
    if (Buffer.byteLength(JSON.stringify(payload)) > 1 << 20)
      throw new AtelierError('PAYLOAD_TOO_LARGE', 'payload is larger than 1 MiB', { field: 'payload' });
    const ttl = Math.min(req.ttlSeconds ?? Infinity, this.opts.ttls[req.category]);
    // One statement (one round trip, its own transaction): the request, its context, its audit
    // row and the notification, all or nothing; the advisory lock of the audit chain is held
    // for this statement only.
    const [row] = await queryRows<Row>(
      this.pool,
      `WITH i AS (
         INSERT INTO hitl_requests (workshop_id, category, requested_by, payload, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) RETURNING hitl_requests AS r, id
       ), c AS (
         INSERT INTO hitl_request_context (request_id, tenant_id, requester_user_id, requester_kind)
         SELECT i.id, $6, $7, $8 FROM i
       ), a AS (
         INSERT INTO hitl_audit (seq, request_id, event, subject, channel, ip, request_hash, prev_hash, hash)
         SELECT 0, i.id, 'CREATED', $3, $9, $10, hitl_request_digest(i.r), '', '' FROM i
       )
       SELECT (i.r).*, $6::text AS tenant_id, $7::text AS requester_user_id, NULL::timestamptz AS effect_applied_at,
              NULL::text AS effect_error, false AS due,
              pg_notify('${CHANNEL}', json_build_object('id', i.id, 'type', 'created')::text) AS notified
         FROM i`,
      [
        ws.id,
        req.category,
        requester.name.slice(0, 128),
        JSON.stringify(payload),
        ttl,
        ws.tenant_id,
        requester.userId,
        requester.kind,
        origin.channel,
        origin.ip,
      ],
    );
    if (!row) throw new Error('the approval request was not stored');
    const approval = toApproval(row);
    this.localEvents.emit('event', { event: { type: 'created', approval }, tenantId: row.tenant_id } satisfies Scoped);
    return approval;
  }

  /**
   * One decision wins: a single conditional UPDATE (still PENDING, not yet expired by the
   * database clock). Any later or concurrent decision gets CONFLICT with the state as it is.
   */
  async decide(id: string, req: DecideApprovalRequest, actor: ApprovalActor, origin: CallOrigin): Promise<ApprovalRequest> {
    const status: ApprovalStatus = req.decision === 'APPROVE' ? 'APPROVED' : 'REJECTED';
    // The common case in one statement (one round trip, its own transaction, so the audit
    // chain's lock is held that long): the conditional UPDATE, with the rights of checkDecider
    // in its WHERE, its audit row and the notification. When it decides nothing, the slow path
    // below reads the request and says exactly why.
    if (actor.kind === 'user' && UUID.test(id)) {
      const [won] = await queryRows<Row>(
        this.pool,
        `WITH d AS (
           UPDATE hitl_requests h SET status = $2::hitl_status, decided_by = $3, decided_at = now(),
                  decision_reason = CASE WHEN EXISTS (SELECT 1 FROM hitl_request_context c
                                                       WHERE c.request_id = h.id AND c.requester_user_id = $10)
                                         THEN $13 || coalesce(': ' || $4, '') ELSE $4 END
            WHERE h.id = $1 AND h.status = 'PENDING' AND h.expires_at > now()
              AND EXISTS (SELECT 1 FROM hitl_request_context c WHERE c.request_id = h.id AND c.tenant_id = $9
                             AND (c.requester_user_id IS NULL OR c.requester_user_id <> $10 OR ($12 AND ${soleMaintainerSql('$10')})))
              AND ($11::text IN ('maintainer', 'admin')
                   OR ($11::text = 'member' AND EXISTS (SELECT 1 FROM workshops w WHERE w.id = h.workshop_id AND w.owner_id = $10)))
           RETURNING h AS r, h.id
         ), a AS (
           INSERT INTO hitl_audit (seq, request_id, event, subject, channel, ip, request_hash, prev_hash, hash)
           SELECT 0, d.id, $5, $6, $7, $8, hitl_request_digest(d.r), '', '' FROM d
         )
         SELECT (d.r).*, c.tenant_id, c.requester_user_id, c.effect_applied_at, c.effect_error, false AS due,
                pg_notify('${CHANNEL}', json_build_object('id', d.id, 'type', 'decided')::text) AS notified
           FROM d JOIN hitl_request_context c ON c.request_id = d.id`,
        [
          id,
          status,
          actor.userName.slice(0, 128),
          req.reason,
          status,
          `user/${actor.userName}`,
          origin.channel,
          origin.ip,
          actor.tenantId,
          actor.userId,
          actor.role,
          this.opts.selfConfirm === 'sole-maintainer',
          SELF_CONFIRMED,
        ],
      );
      if (won) {
        const approval = toApproval(won);
        this.localEvents.emit('event', { event: { type: 'decided', approval }, tenantId: won.tenant_id } satisfies Scoped);
        return approval;
      }
    }
    const [before] = UUID.test(id)
      ? await queryRows<Row & { owner_id: string | null }>(
          this.pool,
          `${SELECT.replace('FROM hitl_requests r', ', w.owner_id FROM hitl_requests r')}
             LEFT JOIN workshops w ON w.id = r.workshop_id WHERE r.id = $1`,
          [id],
        )
      : [];
    if (!before || !this.visible(actor, before)) throw this.notFound(id);
    this.checkDecider(actor, before, before.owner_id, await this.selfConfirmable(actor, before));
    const after = await this.current(id);
    if (!after) throw this.notFound(id);
    const approval = toApproval(after);
    throw new AtelierError(
      'CONFLICT',
      approval.status === 'EXPIRED'
        ? `approval request ${id} expired at ${approval.expiresAt} before it was decided: the agent must ask again`
        : approval.status === 'PENDING'
          ? `approval request ${id} changed while it was being decided: decide it again`
          : `approval request ${id} was already decided (${approval.status} by ${approval.decidedBy ?? 'someone'})`,
      { approval },
    );
  }

  /**
   * A decision by a person identified outside the API (a Slack user mapped to this account):
   * their role in the request's tenant, then exactly the same rules as any other decision.
   */
  async decideAsUser(id: string, req: DecideApprovalRequest, userId: string, origin: CallOrigin): Promise<ApprovalRequest> {
    const row = await this.rowById(id);
    if (!row) throw this.notFound(id);
    const [m] = await queryRows<{ name: string; role: ApprovalActor['role'] }>(
      this.pool,
      `SELECT u.name, m.role FROM users u JOIN memberships m ON m.user_id = u.id
        WHERE u.id = $1 AND m.tenant_id = $2 AND u.disabled_at IS NULL`,
      [userId, row.tenant_id],
    );
    if (!m) throw this.notFound(id);
    const actor: ApprovalActor = { kind: 'user', userId, userName: m.name, tenantId: row.tenant_id, role: m.role, workshopId: null };
    return this.decide(id, req, actor, origin);
  }

  /**
   * Ends a workshop's PENDING requests (it died, failed or is being deleted: nothing waits for them any more):
   * REJECTED by `system` with `reason`, audited, every replica told. Returns how many.
   */
  async endPendingForWorkshop(workshopId: string, reason: string): Promise<number> {
    if (this.closed) return 0;
    const ids = await withTransaction(this.pool, async (c) => {
      const r = await c.query<{ id: string }>(
        `UPDATE hitl_requests SET status = 'REJECTED', decided_by = 'system', decision_reason = $2, decided_at = now()
          WHERE workshop_id = $1 AND status = 'PENDING' AND expires_at > now() RETURNING id`,
        [workshopId, reason.slice(0, 4000)],
      );
      const ended = r.rows.map((x) => x.id);
      if (ended.length > 0) await this.audit(c, ended, 'REJECTED', 'system', { channel: 'system', ip: null });
      return ended;
    });
    for (const id of ids)
      void this.rowById(id)
        .then((row) => {
          if (row)
            this.localEvents.emit('event', {
              event: { type: 'decided', approval: toApproval(row) },
              tenantId: row.tenant_id,
            } satisfies Scoped);
        })
        .catch(() => undefined);
    return ids.length;
  }

  /** Marks every due PENDING request (or only these) EXPIRED, audited, and tells every replica. */
  async expireDue(ids?: string[]): Promise<number> {
    if (this.closed) return 0;
    const n = await withTransaction(this.pool, async (c) => {
      const r = await c.query<{ id: string }>(
        `UPDATE hitl_requests SET status = 'EXPIRED', decided_at = expires_at
          WHERE status = 'PENDING' AND expires_at <= now() ${ids ? 'AND id = ANY($1::uuid[])' : ''} RETURNING id`,
        ids ? [ids] : [],
      );
      if (r.rows.length > 0)
        await this.audit(
          c,
          r.rows.map((x) => x.id),
          'EXPIRED',
          'system',
          { channel: 'system', ip: null },
        );
      return r.rows.map((x) => x.id);
    });
    // This replica expired them: its notifiers (Slack) say so, once.
    for (const id of n)
      void this.rowById(id)
        .then((row) => {
          if (row)
            this.localEvents.emit('event', {
              event: { type: 'expired', approval: toApproval(row) },
              tenantId: row.tenant_id,
            } satisfies Scoped);
        })
        .catch(() => undefined);
    return n.length;
  }

  /**
   * Waits for a decision: subscribe first, then read, so a notification between the two is
   * never missed; re-read on every wake (and at the expiry time), or take the row the
   * notification's own read found decided. Resolves with the request as it stands when decided,
   * expired, or when `timeoutMs` has passed (still PENDING).
   */
  async wait(id: string, actor: ApprovalActor | null, timeoutMs: number, signal?: AbortSignal): Promise<ApprovalRequest> {
    const deadline = Date.now() + timeoutMs;
    let fresh: Row | undefined;
    for (;;) {
      let wake!: (row?: Row) => void;
      const woken = new Promise<Row | undefined>((r) => (wake = r));
      const unsubscribe = this.subscribe(id, wake);
      const onAbort = (): void => wake();
      signal?.addEventListener('abort', onAbort);
      let timer: NodeJS.Timeout | undefined;
      try {
        const a =
          fresh && fresh.status !== 'PENDING' && (!actor || this.visible(actor, fresh)) ? toApproval(fresh) : await this.get(id, actor);
        const left = deadline - Date.now();
        if (a.status !== 'PENDING' || left <= 0 || signal?.aborted || this.closed) return a;
        // The local clock only says when to look again; the database decides whether it expired.
        const untilExpiry = Math.max(20, Date.parse(a.expiresAt) - Date.now() + 20);
        fresh = await Promise.race([
          woken,
          new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), Math.min(left, untilExpiry)))),
        ]);
      } finally {
        if (timer) clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        unsubscribe();
      }
    }
  }

  // ---- effects ---------------------------------------------------------------------------

  /** Applies an approved request's effect once (effects.ts). */
  applyEffect(approval: ApprovalRequest): Promise<void> {
    return this.effects.apply(approval);
  }

  /** Marks an approved request as used, once: true for the one caller that consumed it (effects.ts). */
  consume(id: string): Promise<boolean> {
    return this.effects.consume(id);
  }

  /** An approved, not yet used request of this workshop and category whose payload contains `match` (effects.ts). */
  findApprovedUnused(
    workshopId: string,
    category: ApprovalCategory,
    match: Record<string, unknown>,
    accept?: (payload: Record<string, unknown>) => boolean,
  ): Promise<ApprovalRequest | undefined> {
    return this.effects.findApprovedUnused(workshopId, category, match, accept);
  }

  // ---- audit -----------------------------------------------------------------------------

  /** Checks the audit chain against the requests (auditChain.ts). */
  verifyAudit(): Promise<AuditVerification> {
    return verifyAuditChain(this.pool);
  }
}

function eventType(event: 'CREATED' | 'APPROVED' | 'REJECTED' | 'EXPIRED'): ApprovalEvent['type'] {
  return event === 'CREATED' ? 'created' : event === 'EXPIRED' ? 'expired' : 'decided';
}

function requesterName(actor: ApprovalActor): string {
  return actor.kind === 'agent' ? `agent/${actor.workshopId ?? 'unknown'}` : `user/${actor.userName}`;
}

/** True for a status name (query parameters). */
export function isApprovalStatus(v: unknown): v is ApprovalStatus {
  return typeof v === 'string' && (APPROVAL_STATUSES as readonly string[]).includes(v);
}

/** True for a category name (query parameters). */
export function isApprovalCategory(v: unknown): v is ApprovalCategory {
  return typeof v === 'string' && (APPROVAL_CATEGORIES as readonly string[]).includes(v);
}

/**
 * Whether every request of the tenant concerns `actor`: a maintainer or admin decides any; anyone
 * else is concerned by the workshops they own (an agent by its own workshop, which `visible` keeps).
 */
function concernsEveryWorkshop(actor: ApprovalActor): boolean {
  return actor.kind === 'agent' || actor.role === 'maintainer' || actor.role === 'admin';
}

/** Whether an event may be shown to this caller (the WebSocket stream's filter). */
export function eventVisibleTo(actor: ApprovalActor, scoped: { event: ApprovalEvent; tenantId: string }): boolean {
  if (scoped.tenantId !== actor.tenantId) return false;
  return actor.kind !== 'agent' || scoped.event.approval.workshopId === actor.workshopId;
}
