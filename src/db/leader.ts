import pg from 'pg';

/**
 * One node of an installation (every server on the same PostgreSQL) runs its periodic jobs:
 * approval expiry, OIDC state pruning, exec log pruning. The leader is whoever holds a
 * session-level advisory lock on a connection of its own; the others try again every
 * `retryMs`. The lock goes with its connection: when the leader dies, is stopped, or loses
 * the database (a failed ping every `retryMs`), another node takes over at its next try, so
 * within about `retryMs` plus the database's own detection of a dead client (TCP keep-alive).
 * A job that runs twice in that window is harmless: each is idempotent by the database clock
 * (an UPDATE … WHERE expires_at <= now()); leadership saves work and keeps the logs single.
 */
export interface Leadership {
  /** True while this node holds the lock (read it at each run of a job). */
  readonly isLeader: boolean;
  /** Resolves once the first attempt is done (leader or not); never rejects. */
  readonly ready: Promise<void>;
  close(): Promise<void>;
}

/** The lock's key: one per installation (the database), the same on every node. */
const LOCK_KEY = 'atelier:periodic-jobs';

export function lead(
  connectionString: string,
  opts: { retryMs?: number; onChange?: (leader: boolean) => void; onError?: (err: Error) => void } = {},
): Leadership {
  const retryMs = opts.retryMs ?? 2000;
  let closed = false;
  let leader = false;
  let client: pg.Client | undefined;
  let timer: NodeJS.Timeout | undefined;
  let attempt: Promise<void> | undefined;

  const setLeader = (v: boolean): void => {
    if (leader === v) return;
    leader = v;
    opts.onChange?.(v);
  };
  const drop = (c: pg.Client): void => {
    if (client === c) client = undefined;
    c.removeAllListeners();
    c.on('error', () => undefined);
    void c.end().catch(() => undefined);
    setLeader(false);
  };
  const tick = async (): Promise<void> => {
    try {
      if (!client) {
        const c = new pg.Client({ connectionString, connectionTimeoutMillis: 5000, keepAlive: true });
        c.on('error', (err) => {
          opts.onError?.(err);
          drop(c);
        });
        await c.connect();
        if (closed) return void drop(c);
        client = c;
      }
      const c = client;
      if (leader) {
        // Still holding it: the connection must still be alive (else another node holds it now).
        await c.query('SELECT 1');
      } else {
        const r = await c.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtext($1)) AS ok', [LOCK_KEY]);
        if (closed) return;
        setLeader(r.rows[0]?.ok === true);
      }
    } catch (err) {
      opts.onError?.(err as Error);
      if (client) drop(client);
    }
  };
  const loop = (): void => {
    if (closed) return;
    attempt = tick().finally(() => {
      attempt = undefined;
      if (!closed) timer = setTimeout(loop, retryMs).unref();
    });
  };
  loop();
  const ready = attempt!.then(() => undefined);
  return {
    get isLeader() {
      return leader;
    },
    ready,
    async close() {
      closed = true;
      clearTimeout(timer);
      await attempt;
      // Ending the session releases the lock at once: another node takes over at its next try.
      if (client) drop(client);
      setLeader(false);
    },
  };
}
