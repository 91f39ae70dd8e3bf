import { asDatabaseError, type Pool } from '../db/index.js';
import type { EgressDecision } from './types.js';

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

/** The table's row: the record's fields, with the database's types and names where they differ. */
type Row = Omit<EgressRecord, 'id' | 'at' | 'approvalId'> & { id: string; at: Date; approval_id: string | null };

const FLUSH_MS = 100;
const RETRY_MS = 2000;
const PRUNE_EVERY_MS = 10 * 60_000;
/** Decisions are kept this long (then removed), and always removed with their workshop. */
export const RETENTION_DAYS = 14;

const cut = (v: string, n: number): string => (v.length > n ? `${v.slice(0, n - 1)}…` : v);

/** What the database will take whatever the proxy saw: an integer port, bounded texts. */
function clean(d: EgressDecision): EgressDecision {
  const port = Number.isInteger(d.port) && d.port >= 0 && d.port <= 65535 ? d.port : 0;
  return {
    ...d,
    port,
    host: cut(d.host, 300),
    message: cut(d.message, 1000),
    ...(d.entry !== undefined ? { entry: cut(d.entry, 300) } : {}),
    ...(d.address !== undefined ? { address: cut(d.address, 100) } : {}),
    ...(d.approvalId !== undefined ? { approvalId: cut(d.approvalId, 100) } : {}),
  };
}
/** Rows per INSERT (one array parameter per column, so the size is bounded only by the memory it takes). */
const MAX_BATCH = 2000;
/** Beyond this many unwritten decisions (database down), the oldest are dropped and counted. */
const MAX_PENDING = 20_000;

/**
 * Every decision of every workshop's proxy, kept in PostgreSQL. Writes are batched (one INSERT
 * per 100 ms, up to 2000 rows, as 12 column arrays) so that recording never slows a request down; a database outage costs at most the
 * oldest unwritten decisions beyond 20 000, and says so in the log.
 */
export class EgressJournal {
  private pending: { workshopId: string; d: EgressDecision }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private dropped = 0;
  private failing = false;
  private pruned = 0;

  constructor(
    private readonly pool: Pool,
    private readonly log: { warn(obj: object, msg?: string): void },
  ) {}

  record(workshopId: string, d: EgressDecision): void {
    this.pending.push({ workshopId, d: clean(d) });
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
    // Everything pending when asked, batch after batch (one write at a time, in order), so that a
    // reader sees every decision made before it asked: a batch already being written (taken by
    // the timer's flush) included.
    while (this.flushing) await this.flushing;
    for (let left = this.pending.length; left > 0;) {
      while (this.flushing) await this.flushing;
      if (this.pending.length === 0) break;
      const batch = this.pending.splice(0, Math.min(MAX_BATCH, left));
      left -= batch.length;
      this.flushing = this.write(batch).finally(() => (this.flushing = undefined));
      await this.flushing;
      if (this.failing) break;
    }
    // After a failure (database away) the next attempt waits longer, so the log is not flooded.
    if (this.pending.length > 0) this.timer ??= setTimeout(() => void this.flush(), this.failing ? RETRY_MS : FLUSH_MS);
  }

  private async write(batch: { workshopId: string; d: EgressDecision }[]): Promise<void> {
    // One array per column (12 parameters whatever the batch size, rather than 12 per row): the
    // rows are unnested in the order they were recorded.
    const cols: unknown[][] = Array.from({ length: 12 }, () => new Array<unknown>(batch.length));
    for (let i = 0; i < batch.length; i++) {
      const { workshopId, d } = batch[i]!;
      cols[0]![i] = workshopId;
      cols[1]![i] = d.at;
      cols[2]![i] = d.protocol;
      cols[3]![i] = d.host;
      cols[4]![i] = d.port;
      cols[5]![i] = d.allowed;
      cols[6]![i] = d.outcome;
      cols[7]![i] = d.reason;
      cols[8]![i] = d.message;
      cols[9]![i] = d.entry ?? null;
      cols[10]![i] = d.address ?? null;
      cols[11]![i] = d.approvalId ?? null;
    }
    try {
      // A decision for a workshop deleted meanwhile has no row to hang on: skipped by the join.
      await this.pool.query(
        `INSERT INTO egress_decisions (workshop_id, at, protocol, host, port, allowed, outcome, reason, message, entry, address, approval_id)
         SELECT v.workshop_id, v.at, v.protocol, v.host, v.port, v.allowed, v.outcome, v.reason, v.message, v.entry, v.address, v.approval_id
         FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::int[], $6::bool[], $7::text[], $8::text[], $9::text[],
                     $10::text[], $11::text[], $12::text[])
              WITH ORDINALITY AS v(workshop_id, at, protocol, host, port, allowed, outcome, reason, message, entry, address, approval_id, n)
         WHERE EXISTS (SELECT 1 FROM workshops w WHERE w.id = v.workshop_id)
         ORDER BY v.n`,
        cols,
      );
      this.failing = false;
      if (this.dropped > 0) {
        this.log.warn({ dropped: this.dropped }, 'egress decisions were dropped while the database was unavailable');
        this.dropped = 0;
      }
      await this.prune();
    } catch (err) {
      const code = String((err as { code?: unknown }).code ?? '');
      if (/^2[23]/.test(code)) {
        // A row the database refuses (data error): never retried as is, or it would block every
        // workshop's decisions behind it. Write the rows one by one and drop the refused ones.
        if (batch.length > 1) {
          for (const one of batch) await this.write([one]);
        } else
          this.log.warn({ err: (err as Error).message, workshop: batch[0]?.workshopId }, 'an egress decision was refused by the database');
        return;
      }
      // The database is away: put them back (oldest first) for a later attempt; the cap above bounds memory.
      this.pending.unshift(...batch);
      if (!this.failing) this.log.warn({ err: (err as Error).message }, 'egress decisions not written yet (database unavailable)');
      this.failing = true;
    }
  }

  /** Keeps RETENTION_DAYS of decisions (checked at most every 10 minutes). */
  private async prune(): Promise<void> {
    if (Date.now() - this.pruned < PRUNE_EVERY_MS) return;
    this.pruned = Date.now();
    await this.pool
      .query(`DELETE FROM egress_decisions WHERE at < now() - make_interval(days => $1)`, [RETENTION_DAYS])
      .catch((err: Error) => this.log.warn({ err: err.message }, 'could not prune old egress decisions'));
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

  /** Writes everything pending (for at most 3 s) before the server stops. */
  async close(): Promise<void> {
    const deadline = Date.now() + 3000;
    while (this.pending.length > 0 && Date.now() < deadline) {
      await this.flush().catch(() => undefined);
      if (this.failing) break;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
