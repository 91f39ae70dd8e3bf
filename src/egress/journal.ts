import { asDatabaseError, type Pool } from '../db/index.js';
import type { EgressDecision } from './proxy.js';

/** A decision as `atelier workshops egress` shows it. */
export interface EgressRecord {
  id: number;
  at: string;
  protocol: string;
  host: string;
  port: number;
  allowed: boolean;
  outcome: string;
  reason: string;
  message: string;
  entry: string | null;
  address: string | null;
  approvalId: string | null;
}

interface Row {
  id: string;
  at: Date;
  protocol: string;
  host: string;
  port: number;
  allowed: boolean;
  outcome: string;
  reason: string;
  message: string;
  entry: string | null;
  address: string | null;
  approval_id: string | null;
}

const FLUSH_MS = 100;
const MAX_BATCH = 500;
/** Beyond this many unwritten decisions (database down), the oldest are dropped and counted. */
const MAX_PENDING = 20_000;

/**
 * Every decision of every workshop's proxy, kept in PostgreSQL. Writes are batched (one INSERT
 * per 100 ms) so that recording never slows a request down; a database outage costs at most the
 * oldest unwritten decisions beyond 20 000, and says so in the log.
 */
export class EgressJournal {
  private pending: { workshopId: string; d: EgressDecision }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private dropped = 0;

  constructor(
    private readonly pool: Pool,
    private readonly log: { warn(obj: object, msg?: string): void },
  ) {}

  record(workshopId: string, d: EgressDecision): void {
    this.pending.push({ workshopId, d });
    if (this.pending.length > MAX_PENDING) {
      this.dropped += this.pending.length - MAX_PENDING;
      this.pending.splice(0, this.pending.length - MAX_PENDING);
    }
    this.timer ??= setTimeout(() => void this.flush(), FLUSH_MS);
  }

  /** Writes what is pending (also called before reading, so a reader sees its own requests). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    while (this.flushing) await this.flushing;
    if (this.pending.length === 0) return;
    const batch = this.pending.splice(0, MAX_BATCH);
    this.flushing = this.write(batch).finally(() => (this.flushing = undefined));
    await this.flushing;
    if (this.pending.length > 0) this.timer ??= setTimeout(() => void this.flush(), FLUSH_MS);
  }

  private async write(batch: { workshopId: string; d: EgressDecision }[]): Promise<void> {
    // Parameters in VALUES have no type of their own: each is cast to its column's.
    const types = ['text', 'timestamptz', 'text', 'text', 'int', 'bool', 'text', 'text', 'text', 'text', 'text', 'text'];
    const cols = types.length;
    const values: unknown[] = [];
    const rows = batch.map(({ workshopId, d }, i) => {
      values.push(
        workshopId,
        d.at,
        d.protocol,
        d.host,
        d.port,
        d.allowed,
        d.outcome,
        d.reason,
        d.message,
        d.entry ?? null,
        d.address ?? null,
        d.approvalId ?? null,
      );
      return `(${types.map((t, j) => `$${i * cols + j + 1}::${t}`).join(', ')})`;
    });
    try {
      // A decision for a workshop deleted meanwhile has no row to hang on: skipped by the join.
      await this.pool.query(
        `INSERT INTO egress_decisions (workshop_id, at, protocol, host, port, allowed, outcome, reason, message, entry, address, approval_id)
         SELECT v.* FROM (VALUES ${rows.join(', ')}) AS v(workshop_id, at, protocol, host, port, allowed, outcome, reason, message, entry, address, approval_id)
         WHERE EXISTS (SELECT 1 FROM workshops w WHERE w.id = v.workshop_id)`,
        values,
      );
      if (this.dropped > 0) {
        this.log.warn({ dropped: this.dropped }, 'egress decisions were dropped while the database was unavailable');
        this.dropped = 0;
      }
    } catch (err) {
      // Put them back (oldest first) for the next attempt; the cap above bounds memory.
      this.pending.unshift(...batch);
      this.log.warn({ err: (err as Error).message }, 'egress decisions not written yet');
    }
  }

  /**
   * Decisions of one workshop, oldest first: the last `limit` ones, or with `afterId` the first
   * `limit` ones after it (what a follower reads next).
   */
  async list(workshopId: string, opts: { afterId?: number; limit?: number } = {}): Promise<EgressRecord[]> {
    await this.flush();
    const cols = 'id, at, protocol, host, port, allowed, outcome, reason, message, entry, address, approval_id';
    const sql =
      opts.afterId === undefined
        ? `SELECT * FROM (SELECT ${cols} FROM egress_decisions WHERE workshop_id = $1 ORDER BY id DESC LIMIT $2) last ORDER BY id`
        : `SELECT ${cols} FROM egress_decisions WHERE workshop_id = $1 AND id > $3 ORDER BY id LIMIT $2`;
    let rows: Row[];
    try {
      rows = (
        await this.pool.query<Row>(
          sql,
          opts.afterId === undefined ? [workshopId, opts.limit ?? 100] : [workshopId, opts.limit ?? 100, opts.afterId],
        )
      ).rows;
    } catch (err) {
      throw asDatabaseError(err);
    }
    return rows.map((r) => ({
      id: Number(r.id),
      at: r.at.toISOString(),
      protocol: r.protocol,
      host: r.host,
      port: r.port,
      allowed: r.allowed,
      outcome: r.outcome,
      reason: r.reason,
      message: r.message,
      entry: r.entry,
      address: r.address,
      approvalId: r.approval_id,
    }));
  }

  async close(): Promise<void> {
    await this.flush().catch(() => undefined);
  }
}
