import pg from 'pg';

/**
 * LISTEN on one channel over a dedicated connection, reconnecting forever. Every (re)connection
 * calls `onResync` once it listens again: notifications sent while it was away are lost, so
 * whoever waits must re-read what it waits for (subscribe, then read — never the other way).
 */
export interface NotificationBus {
  /** Resolves once the first LISTEN is in place (or rejects if the database cannot be reached). */
  ready: Promise<void>;
  close(): Promise<void>;
}

export function listenChannel(
  connectionString: string,
  channel: string,
  handlers: { onNotify: (payload: string) => void; onResync: () => void; onError?: (err: Error) => void },
): NotificationBus {
  if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`bad channel name ${channel}`);
  let closed = false;
  let client: pg.Client | undefined;
  let timer: NodeJS.Timeout | undefined;
  let first = true;
  let resolveReady!: () => void;
  let rejectReady!: (err: Error) => void;
  const ready = new Promise<void>((res, rej) => {
    resolveReady = res;
    rejectReady = rej;
  });

  const connect = async (): Promise<void> => {
    if (closed) return;
    const c = new pg.Client({ connectionString, connectionTimeoutMillis: 5000, keepAlive: true });
    client = c;
    const retry = (err: Error): void => {
      handlers.onError?.(err);
      c.removeAllListeners();
      c.on('error', () => {});
      void c.end().catch(() => undefined);
      if (client === c) client = undefined;
      if (first) {
        first = false;
        rejectReady(err);
      }
      if (!closed) timer = setTimeout(() => void connect(), 500);
    };
    c.on('error', retry);
    c.on('end', () => {
      if (!closed && client === c) retry(new Error('notification connection ended'));
    });
    c.on('notification', (msg) => {
      if (msg.channel === channel && msg.payload !== undefined) handlers.onNotify(msg.payload);
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${channel}`);
    } catch (err) {
      retry(err as Error);
      return;
    }
    if (first) {
      first = false;
      resolveReady();
    } else {
      handlers.onResync();
    }
  };
  void connect();
  return {
    ready,
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      const c = client;
      client = undefined;
      if (c) {
        c.removeAllListeners();
        c.on('error', () => {});
        await c.end().catch(() => undefined);
      }
    },
  };
}
