import { useEffect, useState } from 'react';
import {
  APPROVAL_CATEGORIES,
  APPROVAL_STATUSES,
  approvalAudit,
  listApprovals,
  listWorkshops,
  type Approval,
  type ApprovalCategory,
  type ApprovalStatus,
  type AuditEntry,
  type HistoryFilter,
} from './api.ts';
import { CATEGORY_LABEL, preview, visible } from './ApprovalsList.tsx';
import { ListTable } from './ListTable.tsx';
import { effectOf } from './pending.ts';
import { usePoll } from './usePoll.ts';

const POLL_MS = 3000;

/** Every request of the tenant, newest first, filtered by status, category and workshop (the server filters). */
export function History({ onOpen, onSignedOut }: { onOpen: (a: Approval) => void; onSignedOut: () => void }) {
  const [filter, setFilter] = useState<HistoryFilter>({});
  const { data, error } = usePoll(() => listApprovals(filter), POLL_MS, onSignedOut, JSON.stringify(filter));
  const workshops = usePoll(listWorkshops, 10_000, onSignedOut, 'history-workshops');
  const names = new Map((workshops.data?.items ?? []).map((w) => [w.id, w.name]));
  const set = (patch: Partial<HistoryFilter>): void => {
    const next = { ...filter, ...patch };
    for (const k of Object.keys(next) as (keyof HistoryFilter)[]) if (!next[k]) delete next[k];
    setFilter(next);
  };
  return (
    <section aria-labelledby="history-title">
      <h1 id="history-title">History</h1>
      <form className="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <label>
          Status{' '}
          <select value={filter.status ?? ''} onChange={(e) => set({ status: e.target.value as ApprovalStatus })}>
            <option value="">any</option>
            {APPROVAL_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Category{' '}
          <select value={filter.category ?? ''} onChange={(e) => set({ category: e.target.value as ApprovalCategory })}>
            <option value="">any</option>
            {APPROVAL_CATEGORIES.map((c) => (
              <option key={c} value={c}>
                {CATEGORY_LABEL[c]}
              </option>
            ))}
          </select>
        </label>
        <label>
          Workshop{' '}
          <select value={filter.workshop ?? ''} onChange={(e) => set({ workshop: e.target.value })}>
            <option value="">any</option>
            {(workshops.data?.items ?? []).map((w) => (
              <option key={w.id} value={w.id}>
                {visible(w.name)}
              </option>
            ))}
          </select>
        </label>
      </form>
      <ListTable
        items={data?.items}
        error={error}
        empty={<p data-testid="history-empty">No request matches.</p>}
        testId="history"
        columns={['Filed', 'What', 'Workshop', 'Asked by', 'Status', 'Why', 'Effect', <span className="sr-only">Open</span>]}
        row={(a) => (
          <tr key={a.id} data-testid={`history-${a.id}`}>
            <td>{new Date(a.createdAt).toLocaleString()}</td>
            <td>{CATEGORY_LABEL[a.category]}</td>
            <td className="wrap">{visible(names.get(a.workshopId) ?? a.workshopId)}</td>
            <td className="wrap">{visible(a.requestedBy)}</td>
            <td>
              {a.status}
              {a.decidedBy ? ` by ${visible(a.decidedBy)}` : ''}
            </td>
            <td className="wrap">{preview(a.payload.justification, 80)}</td>
            <EffectCell approval={a} />
            <td>
              <button type="button" className="secondary" onClick={() => onOpen(a)} aria-label={`Open request ${a.id}`}>
                Open
              </button>
            </td>
          </tr>
        )}
      />
    </section>
  );
}

/** The effect of a decision in a history row (read again with the list until it is known). */
function EffectCell({ approval }: { approval: Approval }) {
  const e = effectOf(approval);
  return (
    <td className={e.state === 'failed' ? 'wrap error' : 'wrap'} data-testid={`effect-${approval.id}`} data-state={e.state}>
      {e.state === 'none' ? '—' : preview(e.text, 120)}
    </td>
  );
}

/** A request's audit trail (who, channel, address, time), read again when its status changes. */
export function AuditTrail({ id, status }: { id: string; status: string }) {
  const [items, setItems] = useState<AuditEntry[]>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    let stop = false;
    approvalAudit(id).then(
      (r) => {
        if (stop) return;
        setItems(r.items);
        setError(undefined);
      },
      (err: unknown) => {
        if (!stop) setError(err instanceof Error ? err.message : String(err));
      },
    );
    return () => {
      stop = true;
    };
  }, [id, status]);
  return (
    <section>
      <h3>Audit trail</h3>
      {error && <p className="error">The audit trail could not be read: {error}</p>}
      {items && (
        <div className="table-wrap">
          <table data-testid="audit-trail">
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Event</th>
                <th scope="col">Who</th>
                <th scope="col">Channel</th>
                <th scope="col">Address</th>
              </tr>
            </thead>
            <tbody>
              {items.map((e) => (
                <tr key={e.seq}>
                  <td>{new Date(e.at).toLocaleString()}</td>
                  <td>{e.event}</td>
                  <td className="wrap">{visible(e.subject)}</td>
                  <td>{e.channel}</td>
                  <td className="wrap">{e.ip === null ? '—' : visible(e.ip)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
