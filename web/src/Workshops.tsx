import { useRef } from 'react';
import { egressLog, getWorkshop, listWorkshops, type EgressEntry, type EgressRecord } from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { Link } from './router.tsx';
import { usePoll } from './usePoll.ts';

const POLL_MS = 2000;

function bytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`;
}

/** Policy entries, each with where it came from (an approval: who decided it). */
function EntryList({ entries, testId }: { entries: EgressEntry[]; testId: string }) {
  return (
    <ul data-testid={testId}>
      {entries.length === 0 ? (
        <li className="muted">(nothing)</li>
      ) : (
        entries.map((e, i) => (
          <li key={i}>
            {visible(e.entry)}
            {e.rule === 'allowRange' ? ' (address range)' : ''}{' '}
            <span className="muted">
              ({e.origin}
              {e.approval?.decidedBy ? `, approved by ${e.approval.decidedBy}` : ''})
            </span>
          </li>
        ))
      )}
    </ul>
  );
}

/** The tenant's workshops, their status read again every 2 s. */
export function WorkshopsList({ onSignedOut }: { onSignedOut: () => void }) {
  const { data, error } = usePoll(listWorkshops, POLL_MS, onSignedOut, 'list');
  return (
    <section aria-labelledby="ws-title">
      <h1 id="ws-title">Workshops</h1>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {!data ? (
        <p className="muted">Loading…</p>
      ) : data.items.length === 0 ? (
        <p>No workshop yet: create one with `atelier workshops create --repo PATH`.</p>
      ) : (
        <div className="table-wrap">
          <table data-testid="workshops">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">Repository</th>
                <th scope="col">Id</th>
              </tr>
            </thead>
            <tbody>
              {data.items.map((w) => (
                <tr key={w.id}>
                  <td>
                    <Link to={`/workshops/${encodeURIComponent(w.id)}`}>{visible(w.name)}</Link>
                  </td>
                  <td data-testid={`status-${w.id}`}>{w.status}</td>
                  <td className="wrap">
                    <code>{visible(w.repo)}</code>
                  </td>
                  <td>
                    <code>{w.id}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

/** One workshop: status, limits, its egress policy and the proxy's decisions, read again every 2 s. */
export function WorkshopPage({ id, onSignedOut }: { id: string; onSignedOut: () => void }) {
  const { data: w, error } = usePoll(() => getWorkshop(id), POLL_MS, onSignedOut, id);
  // The log grows: each poll asks only for what came after the last record seen.
  const log = useRef<{ id: string; items: EgressRecord[] }>({ id, items: [] });
  if (log.current.id !== id) log.current = { id, items: [] };
  const egress = usePoll(
    async () => {
      const last = log.current.items.at(-1)?.id;
      const { items } = await egressLog(id, last);
      log.current.items = [...log.current.items, ...items].slice(-500);
      return log.current.items;
    },
    POLL_MS,
    onSignedOut,
    id,
  );
  const records = egress.data ?? [];
  return (
    <section aria-labelledby="w-title">
      <p>
        <Link to="/workshops">← Workshops</Link>
      </p>
      <h1 id="w-title">{w ? visible(w.name) : id}</h1>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {w && (
        <>
          <dl className="facts">
            <dt>Status</dt>
            <dd data-testid="workshop-status">
              {w.status}
              {w.statusReason ? `: ${visible(w.statusReason)}` : ''}
            </dd>
            <dt>Id</dt>
            <dd>
              <code>{w.id}</code>
            </dd>
            <dt>Repository</dt>
            <dd>
              <code>{visible(w.repo)}</code>
            </dd>
            <dt>Limits</dt>
            <dd data-testid="workshop-limits">
              {w.limits.cpus} CPU · {bytes(w.limits.memoryBytes)} memory · {w.limits.pids} processes
            </dd>
            <dt>Budget</dt>
            <dd>{w.budgetUsd === null ? 'none' : `$${w.budgetUsd}`}</dd>
          </dl>
          {w.warnings.length > 0 && (
            <ul className="error">
              {w.warnings.map((x, i) => (
                <li key={i}>{visible(x)}</li>
              ))}
            </ul>
          )}
          <h2>Egress policy</h2>
          <div className="before-after">
            <div>
              <h3>Allowed</h3>
              <EntryList entries={w.egress.policy.filter((e) => e.rule !== 'deny')} testId="egress-allow" />
            </div>
            <div>
              <h3>Denied</h3>
              <EntryList entries={w.egress.policy.filter((e) => e.rule === 'deny')} testId="egress-deny" />
            </div>
          </div>
        </>
      )}
      <h2>Egress log</h2>
      {egress.error && (
        <p role="alert" className="error">
          {egress.error}
        </p>
      )}
      {records.length === 0 ? (
        <p className="muted" data-testid="egress-empty">
          No connection attempt yet.
        </p>
      ) : (
        <div className="table-wrap">
          <table data-testid="egress-log">
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Destination</th>
                <th scope="col">Decision</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody>
              {[...records].reverse().map((r) => (
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
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
