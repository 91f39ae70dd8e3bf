import { randomBytes } from 'node:crypto';
import { AtelierError, MAX_EXEC_WAIT_SECONDS, StartExecRequest } from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import type { Principal } from '../identity/index.js';
import type { RunningExec, WorkshopService } from './service.js';

/** Output kept per command; past it the command runs on and `truncated` says the rest was dropped. */
export const MAX_EXEC_OUTPUT_BYTES = 1 << 20;
/** Ended commands and their output are deleted this long after they end (and with their workshop). */
export const EXEC_RETENTION_DAYS = 7;
// The longest wait and the request body are the wire contract's (core), re-exported here.
export { MAX_EXEC_WAIT_SECONDS, StartExecRequest };

// Output is written in batches: at most this long after it was produced, or this large.
const FLUSH_MS = 50;
const FLUSH_BYTES = 64 << 10;
const PRUNE_EVERY_MS = 60 * 60 * 1000;

export type ExecStatus = 'Running' | 'Exited' | 'Failed' | 'Lost';

/** A piece of output: `offset` is its byte position in the command's combined output, `data` base64. */
export interface ExecChunk {
  stream: 'stdout' | 'stderr';
  offset: number;
  data: string;
}

/** The stable JSON shape of a command started through the async exec API. */
export interface ExecView {
  id: string;
  workshopId: string;
  command: string[];
  status: ExecStatus;
  exitCode: number | null;
  signal: string | null;
  error: { code: string; message: string } | null;
  startedAt: string;
  endedAt: string | null;
  /** Output from `after` on (all of it by default), in order. */
  chunks: ExecChunk[];
  /** Where the next read starts (`?after=`): the bytes stored so far. */
  nextOffset: number;
  /** True when the output passed MAX_EXEC_OUTPUT_BYTES: what came after was not kept. */
  truncated: boolean;
}

interface ExecRow {
  id: string;
  workshop_id: string;
  command: string[];
  status: ExecStatus;
  exit_code: number | null;
  signal: string | null;
  error: { code: string; message: string } | null;
  output_bytes: string;
  truncated: boolean;
  instance: string;
  started_at: Date;
  ended_at: Date | null;
}

interface Live {
  /** Settles once the command ended and its last output and status are written. */
  settled: Promise<void>;
}

interface Logger {
  warn(obj: object, msg?: string): void;
}

function newExecId(): string {
  return `ex-${randomBytes(12).toString('base64url').replace(/[-_]/g, 'x').toLowerCase()}`;
}

/**
 * Commands whose output is kept in PostgreSQL as it is produced (for the MCP tools and any
 * client that may go away): started with the workshop service's own `exec`, read back by offset.
 */
export class ExecLog {
  private readonly live = new Map<string, Live>();
  private readonly instance = newExecId().slice(3);
  private readonly pruner: NodeJS.Timeout;

  constructor(
    private readonly pool: Pool,
    private readonly workshops: WorkshopService,
    private readonly log: Logger,
    /** Whether this node runs the installation's periodic jobs (src/db/leader.ts): the pruning is one of them. */
    private readonly isLeader: () => boolean = () => true,
  ) {
    this.pruner = setInterval(() => void this.prune(), PRUNE_EVERY_MS);
    this.pruner.unref();
    void this.prune();
  }

  /** Starts a command (same rights and checks as exec); answers once it ended or after `waitSeconds`. */
  async start(workshopId: string, req: StartExecRequest, actor: Principal): Promise<ExecView> {
    const { waitSeconds: wait, ...execReq } = req;
    const id = newExecId();
    const run = await this.workshops.exec(workshopId, execReq, actor);
    // Its output is held until the row exists; a database that refuses the row stops the command.
    const inserted = queryRows(
      this.pool,
      `INSERT INTO execs (id, workshop_id, actor_id, command, status, instance) VALUES ($1, $2, $3, $4, 'Running', $5)`,
      [id, workshopId, actor.userId, JSON.stringify(execReq.command), this.instance],
    );
    this.follow(
      id,
      run,
      inserted.then(() => undefined),
    );
    try {
      await inserted;
    } catch (err) {
      run.kill();
      // Deleted between the start and the row (foreign key): gone, as the service would say.
      if ((err as { cause?: { code?: unknown } }).cause?.code === '23503' || (err as { code?: unknown }).code === '23503')
        throw new AtelierError('WORKSHOP_NOT_FOUND', `workshop ${workshopId} was deleted`, { id: workshopId });
      throw err;
    }
    // The service has just checked the caller's right to run a command there.
    return this.view(id, 0, wait ?? 0);
  }

  /** Records the command's output as it comes and its end; never throws (a write that fails is logged). */
  private follow(id: string, run: RunningExec, inserted: Promise<void>): void {
    let pending: { stream: 'stdout' | 'stderr'; offset: number; data: Buffer }[] = [];
    let pendingBytes = 0;
    let stored = 0;
    let truncated = false;
    let timer: NodeJS.Timeout | undefined;
    let chain: Promise<void> = inserted.catch(() => undefined);

    const write = (): void => {
      if (timer) clearTimeout(timer);
      timer = undefined;
      if (pending.length === 0) return;
      const batch = pending;
      const bytes = stored;
      const cut = truncated;
      pending = [];
      pendingBytes = 0;
      chain = chain.then(async () => {
        try {
          await this.pool.query(
            `WITH c AS (INSERT INTO exec_output (exec_id, byte_offset, stream, data)
               SELECT $1, o, s, d FROM unnest($2::bigint[], $3::text[], $4::bytea[]) AS t(o, s, d) RETURNING 1)
             UPDATE execs SET output_bytes = $5, truncated = $6 WHERE id = $1`,
            [id, batch.map((b) => b.offset), batch.map((b) => b.stream), batch.map((b) => b.data), bytes, cut],
          );
        } catch (err) {
          this.log.warn({ exec: id, err: (err as Error).message }, 'exec output could not be stored');
        }
      });
    };
    const collect = (stream: 'stdout' | 'stderr') => (c: Buffer) => {
      if (truncated) return;
      let data = c;
      if (stored + data.length > MAX_EXEC_OUTPUT_BYTES) {
        data = data.subarray(0, MAX_EXEC_OUTPUT_BYTES - stored);
        truncated = true;
      }
      if (data.length > 0) {
        pending.push({ stream, offset: stored, data });
        stored += data.length;
        pendingBytes += data.length;
      }
      if (pendingBytes >= FLUSH_BYTES || truncated) write();
      else timer ??= setTimeout(write, FLUSH_MS);
    };
    run.stdout.on('data', collect('stdout'));
    run.stderr.on('data', collect('stderr'));

    const end = async (status: ExecStatus, exitCode: number | null, signal: string | null, error: AtelierError | null): Promise<void> => {
      write();
      await chain;
      try {
        await this.pool.query(
          `UPDATE execs SET status = $2, exit_code = $3, signal = $4, error = $5, output_bytes = $6, truncated = $7, ended_at = now() WHERE id = $1`,
          [id, status, exitCode, signal, error ? JSON.stringify({ code: error.code, message: error.message }) : null, stored, truncated],
        );
      } catch (err) {
        this.log.warn({ exec: id, err: (err as Error).message }, 'exec end could not be stored');
      }
    };
    const settled = run.done
      .then(
        ({ exitCode, signal }) => end('Exited', exitCode, signal, null),
        (err: unknown) =>
          end('Failed', null, null, err instanceof AtelierError ? err : new AtelierError('SANDBOX_FAILED', 'the command failed to run')),
      )
      .finally(() => this.live.delete(id));
    this.live.set(id, { settled });
  }

  /**
   * A command's state and its output from byte `after` on; with `waitSeconds`, waits first for it
   * to end (at most that long). Needs the right to operate the workshop, as exec does: output may
   * hold what only an operator should see.
   */
  async read(id: string, actor: Principal, after = 0, wait = 0): Promise<ExecView> {
    const row = await this.row(id);
    try {
      await this.workshops.authorize(row.workshop_id, actor, 'operate');
    } catch (err) {
      if (err instanceof AtelierError && err.code === 'WORKSHOP_NOT_FOUND') throw this.notFound(id);
      throw err;
    }
    return this.view(id, after, wait, row);
  }

  private async view(id: string, after: number, wait: number, first?: ExecRow): Promise<ExecView> {
    const live = this.live.get(id);
    let waited = false;
    if (live && wait > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([live.settled, new Promise<void>((r) => (timer = setTimeout(r, wait * 1000)))]);
      clearTimeout(timer);
      waited = true;
    }
    let row = first && !waited ? first : await this.row(id);
    if (row.status === 'Running' && !this.live.has(id) && row.instance !== this.instance) {
      // Started by a server process that has stopped since: nobody follows it any more.
      await queryRows(this.pool, `UPDATE execs SET status = 'Lost', ended_at = now() WHERE id = $1 AND status = 'Running'`, [id]);
      row = await this.row(id);
    }
    const chunks = await queryRows<{ byte_offset: string; stream: 'stdout' | 'stderr'; data: Buffer }>(
      this.pool,
      `SELECT byte_offset, stream, data FROM exec_output
        WHERE exec_id = $1 AND byte_offset + octet_length(data) > $2 ORDER BY byte_offset`,
      [id, after],
    );
    let next = after;
    const out: ExecChunk[] = [];
    for (const c of chunks) {
      const offset = Number(c.byte_offset);
      const skip = Math.max(0, after - offset);
      out.push({ stream: c.stream, offset: offset + skip, data: c.data.subarray(skip).toString('base64') });
      next = offset + c.data.length;
    }
    return {
      id: row.id,
      workshopId: row.workshop_id,
      command: row.command,
      status: row.status,
      exitCode: row.exit_code,
      signal: row.signal,
      error: row.error,
      startedAt: row.started_at.toISOString(),
      endedAt: row.ended_at ? row.ended_at.toISOString() : null,
      chunks: out,
      nextOffset: Math.max(next, Math.min(after, Number(row.output_bytes))),
      truncated: row.truncated,
    };
  }

  private notFound(id: string): AtelierError {
    return new AtelierError(
      'NOT_FOUND',
      `exec ${id} does not exist (or its workshop was deleted, or it ended over ${EXEC_RETENTION_DAYS} days ago)`,
      {
        id,
      },
    );
  }

  private async row(id: string): Promise<ExecRow> {
    const [row] = await queryRows<ExecRow>(this.pool, 'SELECT * FROM execs WHERE id = $1', [id]);
    if (!row) throw this.notFound(id);
    return row;
  }

  /** Deletes commands that ended more than EXEC_RETENTION_DAYS ago, with their output. */
  async prune(): Promise<void> {
    if (!this.isLeader()) return;
    await this.pool
      .query('DELETE FROM execs WHERE ended_at < now() - make_interval(days => $1)', [EXEC_RETENTION_DAYS])
      .catch((err: Error) => this.log.warn({ err: err.message }, 'old execs could not be pruned'));
  }

  /** At shutdown: waits (a few seconds at most) for the last output of commands that are ending. */
  async close(): Promise<void> {
    clearInterval(this.pruner);
    const pending = [...this.live.values()].map((l) => l.settled);
    await Promise.race([Promise.allSettled(pending), new Promise((r) => setTimeout(r, 5000).unref())]);
  }
}
