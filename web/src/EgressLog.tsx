import { useEffect, useRef, useState } from 'react';
import { ApiError, followEgress, said, type EgressRecord } from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { ListTable } from './ListTable.tsx';

/** What the page keeps of the log: the newest records, so a busy workshop does not grow the tab's memory. */
export const EGRESS_KEPT = 500;

/**
 * The workshop's egress log, live: the server's NDJSON stream (`?follow=true`), each record added
 * as the proxy decides. The server ends a stream after a minute (the session is checked again at
 * each connection): it is opened again at once from the last id; a lost connection is retried
 * after 0.5 s, doubling to 10 s. A 401 reports the lost session.
 */
export function useEgressLog(id: string, onSignedOut: () => void): { records: EgressRecord[] | undefined; error: string | undefined } {
  const [records, setRecords] = useState<EgressRecord[]>();
  const [error, setError] = useState<string>();
  const signedOut = useRef(onSignedOut);
  signedOut.current = onSignedOut;
  useEffect(() => {
    const abort = new AbortController();
    let kept: EgressRecord[] = [];
    let last: number | undefined;
    setRecords(undefined);
    setError(undefined);
    const run = async (): Promise<void> => {
      let wait = 500;
      while (!abort.signal.aborted) {
        try {
          // Records are drawn in batches: one render per chunk the stream brings, not per line.
          let batch: EgressRecord[] = [];
          let flush: ReturnType<typeof setTimeout> | undefined;
          const draw = (): void => {
            flush = undefined;
            kept = [...kept, ...batch].slice(-EGRESS_KEPT);
            batch = [];
            setRecords(kept);
          };
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
            abort.signal,
            // Connected again: the page no longer says it is trying.
            () => setError(undefined),
          );
          if (flush) clearTimeout(flush);
          draw();
          setError(undefined);
          // A stream the server ended at once (a session about to expire) is not opened again in a tight loop.
          if (Date.now() - opened < 1000) {
            await new Promise((r) => setTimeout(r, wait));
            wait = Math.min(wait * 2, 10_000);
          } else wait = 500;
        } catch (err) {
          if (abort.signal.aborted) return;
          if (err instanceof ApiError && err.status === 401) return signedOut.current();
          setError(`${said(err)}: connecting again…`);
          await new Promise((r) => setTimeout(r, wait));
          wait = Math.min(wait * 2, 10_000);
        }
      }
    };
    void run();
    return () => abort.abort();
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
