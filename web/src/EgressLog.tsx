import { useEffect, useRef, useState } from 'react';
import { ApiError, followEgress, said, SilentStream, type EgressRecord } from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { ListTable } from './ListTable.tsx';

/** What the page keeps of the log: the newest records, so a busy workshop does not grow the tab's memory. */
export const EGRESS_KEPT = 500;

/**
 * The workshop's egress log, live: the server's NDJSON stream (`?follow=true`), each record added
 * as the proxy decides. The server ends a stream after a minute (the session is checked again at
 * each connection): it is opened again at once from the last id. A stream silent for
 * FOLLOW_SILENCE_MS (the server's heartbeat missed three times: a connection that died without a
 * word) is opened again at once; a failed connection is retried after 0.5 s, doubling to 10 s,
 * and at once when the browser says it is back online. The "connecting again" note leaves as
 * soon as a stream delivers (its heartbeat comes first). A 401 reports the lost session.
 */
export function useEgressLog(id: string, onSignedOut: () => void): { records: EgressRecord[] | undefined; error: string | undefined } {
  const [records, setRecords] = useState<EgressRecord[]>();
  const [error, setError] = useState<string>();
  const signedOut = useRef(onSignedOut);
  signedOut.current = onSignedOut;
  useEffect(() => {
    const unmounted = new AbortController();
    let kept: EgressRecord[] = [];
    let last: number | undefined;
    let wait = 500;
    // The connection under way, and the wake-up of a retry's wait: what `online` cuts short.
    let attempt: AbortController | undefined;
    let wake: (() => void) | undefined;
    let kicked = false;
    const sleep = (ms: number): Promise<void> =>
      new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    // The network is back: a stream opened before may have died with the old one without a
    // word, and a retry may be seconds away. Either gives way to a new connection now.
    const online = (): void => {
      wait = 500;
      kicked = true;
      attempt?.abort();
      wake?.();
    };
    window.addEventListener('online', online);
    setRecords(undefined);
    setError(undefined);
    const run = async (): Promise<void> => {
      while (!unmounted.signal.aborted) {
        attempt = new AbortController();
        kicked = false;
        // Records are drawn in batches: one render per chunk the stream brings, not per line.
        let batch: EgressRecord[] = [];
        let flush: ReturnType<typeof setTimeout> | undefined;
        const draw = (): void => {
          flush = undefined;
          kept = [...kept, ...batch].slice(-EGRESS_KEPT);
          batch = [];
          setRecords(kept);
        };
        try {
          setRecords(kept);
          const opened = Date.now();
          await followEgress(
            id,
            last,
            (r) => {
              // A reconnection asks from the last id; the server's order is kept, and nothing twice.
              if (last !== undefined && r.id <= last) return;
              last = r.id;
              batch.push(r);
              flush ??= setTimeout(draw, 50);
            },
            attempt.signal,
            // The stream delivers: the page no longer says it is trying.
            () => setError(undefined),
          );
          // A stream the server ended at once (a session about to expire) is not opened again in a tight loop.
          if (Date.now() - opened < 1000) {
            await sleep(wait);
            wait = Math.min(wait * 2, 10_000);
          } else wait = 500;
        } catch (err) {
          if (unmounted.signal.aborted) return;
          if (err instanceof ApiError && err.status === 401) return signedOut.current();
          // Cut by `online`: connect again at once, nothing to say.
          if (kicked) continue;
          setError(`${said(err)}: connecting again…`);
          // A silent stream took FOLLOW_SILENCE_MS to be noticed already: the next one is opened at once.
          if (err instanceof SilentStream) continue;
          await sleep(wait);
          wait = Math.min(wait * 2, 10_000);
        } finally {
          if (flush) clearTimeout(flush);
          if (batch.length > 0 && !unmounted.signal.aborted) draw();
        }
      }
    };
    void run();
    return () => {
      unmounted.abort();
      attempt?.abort();
      wake?.();
      window.removeEventListener('online', online);
    };
  }, [id]);
  return { records, error };
}

/** The proxy's decisions, newest first: destination, allowed or denied, and why (hosts are the workshop's text). */
export function EgressLog({ id, onSignedOut }: { id: string; onSignedOut: () => void }) {
  const { records, error } = useEgressLog(id, onSignedOut);
  return (
    <ListTable
      items={records && [...records].reverse()}
      error={error}
      empty={
        <p className="muted" data-testid="egress-empty">
          No connection attempt yet.
        </p>
      }
      testId="egress-log"
      columns={['Time', 'Destination', 'Decision', 'Why']}
      row={(r) => (
        <tr key={r.id} className={r.allowed ? undefined : 'denied'}>
          <td>{new Date(r.at).toLocaleTimeString()}</td>
          <td className="wrap">
            <code>
              {visible(r.host)}:{r.port}
            </code>{' '}
            <span className="muted">{r.protocol}</span>
          </td>
          <td>{r.allowed ? 'allowed' : 'denied'}</td>
          <td className="wrap">{visible(r.message || r.reason)}</td>
        </tr>
      )}
    />
  );
}
