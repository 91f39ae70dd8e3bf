// The effects of approved requests (an allowlist entry added, a branch pushed, a grant made…):
// each applied once per request across replicas, under a row lock of its context and recorded
// in the same transaction; those a dead process left undone are applied at the next start; at
// most EFFECT_CONCURRENCY at once per server. An approved command is not applied here but
// consumed, once, by the exec that waited for it.
import { queryRows, withTransaction, type Pool } from '../db/index.js';
import { SELECT, toApproval, type Row } from './rows.js';
import type { CategoryHandler } from './service.js';
import type { ApprovalCategory, ApprovalRequest } from './types.js';

/** Effects applied at once by one server (see slot). */
const EFFECT_CONCURRENCY = 3;

type Log = { warn: (o: object, m: string) => void };

export class EffectRunner {
  /** Effects being applied by this process (one at a time per request), how many, and who waits for a slot. */
  private readonly applying = new Set<string>();
  private running = 0;
  private readonly queue: (() => void)[] = [];
  /** False until the workshops this server runs are recovered (resume): an effect needs its workshop up. */
  private ready = false;
  private closed = false;

  constructor(
    private readonly pool: Pool,
    private readonly handlers: ReadonlyMap<ApprovalCategory, CategoryHandler>,
    private readonly log: Log,
  ) {}

  /** True once resume() ran: effects are applied as requests are decided. */
  get started(): boolean {
    return this.ready;
  }

  /** Applies what a previous run left undone, then every new one as it is decided. */
  async resume(): Promise<void> {
    this.ready = true;
    await this.applyPending();
  }

  close(): void {
    this.closed = true;
  }

  /**
   * Runs `fn` when fewer than EFFECT_CONCURRENCY effects are being applied: each holds a pool
   * connection (its row lock) while its effect uses others, so many decisions at once must not
   * take every connection and wait on each other.
   */
  private async slot(fn: () => Promise<void>): Promise<void> {
    while (this.running >= EFFECT_CONCURRENCY) await new Promise<void>((r) => this.queue.push(r));
    this.running++;
    try {
      await fn();
    } finally {
      this.running--;
      this.queue.shift()?.();
    }
  }

  /** Applies an approved request's effect once: under a row lock, recorded in the same transaction. */
  async apply(approval: ApprovalRequest): Promise<void> {
    const handler = this.handlers.get(approval.category);
    if (!handler?.apply || this.closed || !this.ready || this.applying.has(approval.id)) return;
    this.applying.add(approval.id);
    try {
      if (handler.local && !(await handler.local(approval).catch(() => false))) return;
      await this.slot(() => this.applyLocked(approval, handler));
    } finally {
      this.applying.delete(approval.id);
    }
  }

  private async applyLocked(approval: ApprovalRequest, handler: CategoryHandler): Promise<void> {
    if (this.closed) return;
    try {
      await withTransaction(this.pool, async (c) => {
        const r = await c.query(
          'SELECT 1 FROM hitl_request_context WHERE request_id = $1 AND effect_applied_at IS NULL FOR UPDATE SKIP LOCKED',
          [approval.id],
        );
        if (r.rowCount === 0) return;
        let error: string | null = null;
        try {
          await handler.apply!(approval);
        } catch (err) {
          error = err instanceof Error ? err.message.slice(0, 2000) : String(err);
          this.log.warn({ approval: approval.id, err: error }, 'approvals: effect failed');
        }
        await c.query('UPDATE hitl_request_context SET effect_applied_at = now(), effect_error = $2 WHERE request_id = $1', [
          approval.id,
          error,
        ]);
      });
    } catch (err) {
      this.log.warn({ approval: approval.id, err: String(err) }, 'approvals: could not record an effect; retried at the next start');
    }
  }

  async applyPending(): Promise<void> {
    try {
      const rows = await queryRows<Row>(
        this.pool,
        `${SELECT} WHERE r.status = 'APPROVED' AND c.effect_applied_at IS NULL ORDER BY r.decided_at`,
      );
      await Promise.all(rows.map((r) => this.apply(toApproval(r))));
    } catch (err) {
      this.log.warn({ err: String(err) }, 'approvals: pending effects not applied yet');
    }
  }

  /**
   * Marks an approved request as used, once: true for the one caller that consumed it (an
   * approved command runs once, however many execs race for it).
   */
  async consume(id: string): Promise<boolean> {
    const r = await queryRows<{ request_id: string }>(
      this.pool,
      `UPDATE hitl_request_context c SET effect_applied_at = now() FROM hitl_requests r
        WHERE c.request_id = $1 AND r.id = c.request_id AND r.status = 'APPROVED' AND c.effect_applied_at IS NULL
        RETURNING c.request_id`,
      [id],
    );
    return r.length > 0;
  }

  /** An approved, not yet used request of this workshop and category whose payload contains `match`. */
  async findApprovedUnused(
    workshopId: string,
    category: ApprovalCategory,
    match: Record<string, unknown>,
    accept?: (payload: Record<string, unknown>) => boolean,
  ): Promise<ApprovalRequest | undefined> {
    const rows = await queryRows<Row>(
      this.pool,
      `${SELECT} WHERE r.workshop_id = $1 AND r.category = $2 AND r.status = 'APPROVED' AND c.effect_applied_at IS NULL
         AND r.payload @> $3::jsonb ORDER BY r.decided_at${accept ? '' : ' LIMIT 1'}`,
      [workshopId, category, JSON.stringify(match)],
    );
    // `accept`: a further test of the payload (one that containment cannot say: a key's absence).
    const row = accept ? rows.find((r) => accept(toApproval(r).payload)) : rows[0];
    return row ? toApproval(row) : undefined;
  }
}
