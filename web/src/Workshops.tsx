import { lazy, Suspense, useState } from 'react';
import {
  deleteWorkshop,
  getWorkshop,
  listSessions,
  listWorkshops,
  mayOperate,
  resumeWorkshop,
  said,
  startShell,
  stopSession,
  stopWorkshop,
  type EgressEntry,
  type Role,
  type Workshop,
} from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { CreateWorkshopForm } from './CreateWorkshop.tsx';
import { EgressLog } from './EgressLog.tsx';
import { ListTable } from './ListTable.tsx';
import { Simulators } from './Simulators.tsx';
import { bytes, Usage } from './Usage.tsx';
import { Link, navigate } from './router.tsx';
import { usePoll } from './usePoll.ts';

// xterm.js is most of the app's weight: loaded when a terminal is first opened, not with the page.
const WorkshopTerminal = lazy(() => import('./Terminal.tsx').then((m) => ({ default: m.WorkshopTerminal })));

const POLL_MS = 2000;

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
export function WorkshopsList({ role, onSignedOut }: { role: Role; onSignedOut: () => void }) {
  const { data, error } = usePoll(listWorkshops, POLL_MS, onSignedOut, 'list');
  const [creating, setCreating] = useState(false);
  return (
    <section aria-labelledby="ws-title">
      <h1 id="ws-title">Workshops</h1>
      {role !== 'viewer' &&
        (creating ? (
          <CreateWorkshopForm onCancel={() => setCreating(false)} onCreated={(w) => navigate(`/workshops/${encodeURIComponent(w.id)}`)} />
        ) : (
          <button type="button" onClick={() => setCreating(true)}>
            New workshop
          </button>
        ))}
      <ListTable
        items={data?.items}
        error={error}
        empty={<p>No workshop yet.</p>}
        testId="workshops"
        columns={['Name', 'Status', 'Repository', 'Id']}
        row={(w) => (
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
        )}
      />
    </section>
  );
}

/** One workshop: status, limits and usage, its egress policy read again every 2 s, and the proxy's decisions as they are made. */
export function WorkshopPage({ id, role, userId, onSignedOut }: { id: string; role: Role; userId: string; onSignedOut: () => void }) {
  const { data: w, error } = usePoll(() => getWorkshop(id), POLL_MS, onSignedOut, id);
  const sessions = usePoll(() => listSessions(id), POLL_MS, onSignedOut, `sess-${id}`);
  /** The open terminal: an agent session attached, or the page's own shell (a session it stops on close). */
  const [terminal, setTerminal] = useState<{ session: string; shell?: boolean }>();
  const [terminalError, setTerminalError] = useState<string>();
  const openShell = async (): Promise<void> => {
    setTerminalError(undefined);
    try {
      setTerminal({ session: await startShell(id), shell: true });
    } catch (err) {
      setTerminalError(said(err));
    }
  };
  const closeTerminal = (): void => {
    if (terminal?.shell) void stopSession(id, terminal.session).catch(() => undefined);
    setTerminal(undefined);
  };
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
          {/* Stop, resume and delete: only for those the server lets do them (it checks again). */}
          {mayOperate(role, userId, w) && <WorkshopActions workshop={w} />}
          <Usage workshop={w} onSignedOut={onSignedOut} />
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
      {w && <Simulators workshopId={id} operate={mayOperate(role, userId, w)} onSignedOut={onSignedOut} />}
      <h2>Agent sessions</h2>
      {sessions.error && <p className="error">{sessions.error}</p>}
      {sessions.data &&
        (sessions.data.items.length === 0 ? (
          <p className="muted" data-testid="sessions-empty">
            No agent session.
          </p>
        ) : (
          <div className="table-wrap">
            <table data-testid="sessions">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Command</th>
                  <th scope="col">Started</th>
                  <th scope="col">State</th>
                  <th scope="col">
                    <span className="sr-only">Attach or stop</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {sessions.data.items.map((s) => (
                  <tr key={s.name}>
                    <td>{visible(s.name)}</td>
                    <td className="wrap">
                      <code>{s.command.map((a) => visible(a)).join(' ')}</code>
                    </td>
                    <td>{new Date(s.startedAt).toLocaleString()}</td>
                    <td>{s.running ? `running, ${s.attached} attached` : `ended (exit ${s.exitCode ?? '?'})`}</td>
                    <td>
                      {s.running && role !== 'viewer' && (
                        <button
                          type="button"
                          className="secondary"
                          onClick={() => {
                            if (terminal?.shell && terminal.session !== s.name)
                              void stopSession(id, terminal.session).catch(() => undefined);
                            setTerminal({ session: s.name, shell: terminal?.shell && terminal.session === s.name });
                          }}
                        >
                          Attach
                        </button>
                      )}
                      {s.running && role !== 'viewer' && (
                        <button
                          type="button"
                          className="secondary"
                          aria-label={`Stop session ${s.name}`}
                          onClick={() => {
                            setTerminalError(undefined);
                            if (terminal?.session === s.name) setTerminal(undefined);
                            stopSession(id, s.name).catch((err: unknown) => setTerminalError(said(err)));
                          }}
                        >
                          Stop
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ))}
      {role !== 'viewer' && (
        <>
          <h2>Terminal</h2>
          {terminal ? (
            <>
              <Suspense fallback={<p className="muted">Loading the terminal…</p>}>
                <WorkshopTerminal key={terminal.session} workshopId={id} session={terminal.session} />
              </Suspense>
              <button type="button" className="secondary" onClick={closeTerminal}>
                Close the terminal
              </button>
            </>
          ) : (
            <button type="button" onClick={() => void openShell()}>
              Open a shell
            </button>
          )}
          {terminalError && (
            <p role="alert" className="error">
              {terminalError}
            </p>
          )}
        </>
      )}
      <h2>Egress log</h2>
      <EgressLog id={id} onSignedOut={onSignedOut} />
    </section>
  );
}

/** Stop, resume and delete (after typing the workshop's name); the server's answer when it refuses. */
function WorkshopActions({ workshop }: { workshop: Workshop }) {
  const [busy, setBusy] = useState(false);
  const [answer, setAnswer] = useState<string>();
  const [confirming, setConfirming] = useState(false);
  const [typed, setTyped] = useState('');
  const run = async (f: () => Promise<unknown>, after?: () => void): Promise<void> => {
    setBusy(true);
    setAnswer(undefined);
    try {
      await f();
      after?.();
    } catch (err) {
      setAnswer(said(err));
    } finally {
      setBusy(false);
    }
  };
  const id = workshop.id;
  return (
    <div className="actions">
      <div className="row">
        {workshop.status === 'Running' && (
          <button type="button" className="secondary" disabled={busy} onClick={() => void run(() => stopWorkshop(id))}>
            Stop
          </button>
        )}
        {(workshop.status === 'Suspended' || workshop.status === 'Dead') && (
          <button type="button" disabled={busy} onClick={() => void run(() => resumeWorkshop(id))}>
            Resume
          </button>
        )}
        {!confirming && (
          <button type="button" className="danger" disabled={busy} onClick={() => setConfirming(true)}>
            Delete…
          </button>
        )}
        {busy && <span className="muted">working…</span>}
      </div>
      {confirming && (
        <form
          className="confirm"
          onKeyDown={(e) => {
            // Escape cancels, as it closes the modal.
            if (e.key === 'Escape') {
              setConfirming(false);
              setTyped('');
            }
          }}
          onSubmit={(e) => {
            e.preventDefault();
            if (typed === workshop.name)
              void run(
                () => deleteWorkshop(id),
                () => navigate('/workshops'),
              );
          }}
        >
          <label htmlFor="confirm-delete">
            Deleting removes the workshop, its files and its simulators for good. Type its name, <code>{visible(workshop.name)}</code>, to
            confirm.
          </label>
          <input id="confirm-delete" value={typed} onChange={(e) => setTyped(e.target.value)} autoComplete="off" autoFocus />
          <div className="row">
            <button type="submit" className="danger" disabled={busy || typed !== workshop.name}>
              Delete for good
            </button>
            <button
              type="button"
              className="secondary"
              onClick={() => {
                setConfirming(false);
                setTyped('');
              }}
            >
              Cancel
            </button>
          </div>
        </form>
      )}
      {answer && (
        <p role="alert" className="error" data-testid="workshop-answer">
          {visible(answer)}
        </p>
      )}
    </div>
  );
}
