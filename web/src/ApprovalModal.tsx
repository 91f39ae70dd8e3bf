import { lazy, Suspense, useEffect, useRef, useState, type KeyboardEvent } from 'react';
import { ApiError, canDecide, decide, getApproval, getWorkshop, type Approval, type Role, type Workshop } from './api.ts';
import { CATEGORY_LABEL, visible } from './ApprovalsList.tsx';
import { AuditTrail } from './History.tsx';
import { UnifiedDiff } from './UnifiedDiff.tsx';
import { countdown, effectOf, page, splitDiff } from './pending.ts';

const DIFF_PAGE = 400;
/** The side-by-side view (react-diff-view): its own chunk, loaded when first asked for. */
const SplitDiff = lazy(() => import('./SplitDiff.tsx'));
/** How often an approved request is read again until its effect is known (the live feed tells decisions, not effects). */
const EFFECT_POLL_MS = 1000;

/**
 * One request: what is asked, by whom, why (the agent's words, shown as text only), until when,
 * and the before/after of its category; approve, or reject with a reason. Viewers see no buttons
 * (and the server refuses them anyway).
 */
export function ApprovalModal({
  approval,
  role,
  userName,
  now,
  onClose,
}: {
  approval: Approval;
  role: Role;
  userName: string;
  now: number;
  onClose: () => void;
}) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [answer, setAnswer] = useState<{ kind: 'error' | 'done'; text: string }>();
  // The request as last read here (after a decision, or while its effect is awaited): newer than the prop.
  const [decided, setDecided] = useState<Approval>();

  useEffect(() => {
    const d = dialog.current;
    // Focus goes back where it was once the modal closes: the button that opened it, or, when
    // that left the page (a decided request leaves the list), the page itself.
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    if (d && !d.open) d.showModal();
    return () => {
      d?.close();
      if (opener?.isConnected) opener.focus();
      else document.getElementById('main')?.focus();
    };
  }, []);

  const current = decided && progress(decided) >= progress(approval) ? decided : approval;
  const pending = current.status === 'PENDING';
  const effect = effectOf(current);

  // Approved, the effect not known yet: read the request again until it is (applied or failed).
  useEffect(() => {
    if (effect.state !== 'waiting') return;
    let stop = false;
    const timer = setTimeout(() => {
      getApproval(current.id).then(
        (a) => {
          if (!stop) setDecided(a);
        },
        () => {
          // Read again at the next tick (a network blip); the modal keeps what it showed.
          if (!stop) setDecided((d) => (d ? { ...d } : { ...current }));
        },
      );
    }, EFFECT_POLL_MS);
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, [effect.state, current]);
  const mayDecide = canDecide(role) && pending && current.requestedBy !== userName;

  const submit = async (decision: 'APPROVE' | 'REJECT'): Promise<void> => {
    if (reason.trim() === '') {
      setAnswer({
        kind: 'error',
        text: decision === 'REJECT' ? 'Say why you reject it: the agent is told.' : 'Say why you approve it: it goes in the audit trail.',
      });
      return;
    }
    setBusy(true);
    try {
      const a = await decide(current.id, decision, reason.trim());
      setDecided(a);
      setAnswer({ kind: 'done', text: `${a.status === 'APPROVED' ? 'Approved' : 'Rejected'}.` });
    } catch (err) {
      // The server's own answer (self-approval, already decided, not allowed…), not a generic error.
      setAnswer({ kind: 'error', text: err instanceof ApiError ? `${err.message} (${err.code})` : String(err) });
    } finally {
      setBusy(false);
    }
  };

  return (
    <dialog ref={dialog} className="modal" aria-labelledby="modal-title" onClose={onClose} onKeyDown={trapTab} data-testid="approval-modal">
      <header className="modal-head">
        <h2 id="modal-title">{CATEGORY_LABEL[current.category]}</h2>
        <button type="button" className="secondary" onClick={() => dialog.current?.close()} aria-label="Close">
          Close
        </button>
      </header>
      <dl className="facts">
        <dt>Category</dt>
        <dd>
          <code>{current.category}</code>
        </dd>
        <dt>Workshop</dt>
        <dd>
          <code>{current.workshopId}</code>
        </dd>
        <dt>Asked by</dt>
        <dd>{current.requestedBy}</dd>
        <dt>Status</dt>
        <dd data-testid="modal-status">
          {pending ? (
            <>PENDING · expires in {countdown(Date.parse(current.expiresAt) - now)}</>
          ) : (
            <>
              {current.status}
              {current.decidedBy ? ` by ${current.decidedBy}` : ''}
              {current.decisionReason ? `: ${visible(current.decisionReason)}` : ''}
            </>
          )}
        </dd>
        {effect.state !== 'none' && (
          <>
            <dt>Effect</dt>
            <dd data-testid="modal-effect" data-state={effect.state} className={effect.state === 'failed' ? 'error' : undefined}>
              {visible(effect.text)}
            </dd>
          </>
        )}
      </dl>
      <h3>The agent says</h3>
      <p className="justification full" data-testid="justification">
        {visible(String(current.payload.justification ?? ''))}
      </p>
      <Details approval={current} />
      <AuditTrail id={current.id} status={current.status} />
      {mayDecide && (
        <form className="decide" onSubmit={(e) => e.preventDefault()}>
          <label htmlFor="reason">Reason (required; the agent sees it on a rejection)</label>
          <textarea id="reason" value={reason} maxLength={4000} onChange={(e) => setReason(e.target.value)} rows={3} />
          <div className="row">
            <button type="button" disabled={busy} onClick={() => void submit('APPROVE')}>
              Approve
            </button>
            <button type="button" className="danger" disabled={busy} onClick={() => void submit('REJECT')}>
              Reject
            </button>
          </div>
        </form>
      )}
      {!canDecide(role) && <p className="muted">You are a viewer in this tenant: you can see requests, not decide them.</p>}
      {canDecide(role) && pending && current.requestedBy === userName && (
        <p className="muted">You asked for this: someone else decides it.</p>
      )}
      {answer && (
        <p
          role={answer.kind === 'error' ? 'alert' : 'status'}
          className={answer.kind === 'error' ? 'error' : 'ok'}
          data-testid="decision-answer"
        >
          {answer.text}
        </p>
      )}
    </dialog>
  );
}

/** How far a request has got (pending, decided, its effect known): the modal shows the furthest copy it has. */
function progress(a: Approval): number {
  const state = effectOf(a).state;
  return a.status === 'PENDING' ? 0 : state === 'waiting' ? 1 : 2;
}

const FOCUSABLE =
  'button:not([disabled]), [href], input:not([disabled]), select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex="-1"])';

/**
 * Tab and Shift+Tab go round the dialog's own controls: a modal <dialog> makes the page behind
 * it inert, but the browser would still move focus out to its own toolbar. Escape closes (the
 * dialog's own `cancel`).
 */
function trapTab(e: KeyboardEvent<HTMLDialogElement>): void {
  if (e.key !== 'Tab') return;
  const items = [...e.currentTarget.querySelectorAll<HTMLElement>(FOCUSABLE)].filter((el) => el.offsetParent !== null);
  const first = items[0];
  const last = items.at(-1);
  if (!first || !last) return;
  const at = document.activeElement;
  if (e.shiftKey && (at === first || !e.currentTarget.contains(at))) {
    e.preventDefault();
    last.focus();
  } else if (!e.shiftKey && (at === last || !e.currentTarget.contains(at))) {
    e.preventDefault();
    first.focus();
  }
}

function Details({ approval }: { approval: Approval }) {
  const p = approval.payload;
  switch (approval.category) {
    case 'ALLOWLIST_EXPANSION':
      return <AllowlistDiff approval={approval} />;
    case 'SHELL_COMMAND':
      return (
        <section>
          <h3>Command</h3>
          <pre className="code" data-testid="command">
            {Array.isArray(p.command) ? p.command.map((w) => JSON.stringify(visible(String(w)))).join(' ') : ''}
          </pre>
          {typeof p.cwd === 'string' && (
            <p>
              in <code>{visible(p.cwd)}</code>
            </p>
          )}
          {typeof p.pattern === 'string' && (
            <p>
              caught by the pattern <code>{visible(p.pattern)}</code>
            </p>
          )}
          {typeof p.stdinPreview === 'string' && (
            <>
              <h4>Standard input ({String(p.stdinBytes ?? '?')} bytes), first characters</h4>
              <pre className="code">{visible(p.stdinPreview)}</pre>
            </>
          )}
        </section>
      );
    case 'SECRET_REQUEST':
      return (
        <section>
          <h3>Secret</h3>
          <p>
            <code data-testid="secret-name">{String(p.name ?? '')}</code> for{' '}
            {typeof p.ttlSeconds === 'number' ? countdown(p.ttlSeconds * 1000) : 'the default duration'} (its value is never shown)
          </p>
          {p.mode === 'use' ? (
            <p data-testid="secret-mode" data-mode="use">
              <strong>Use (lower risk)</strong>: the egress proxy sends <code>{visible(`${String(p.header)}: ${String(p.value)}`)}</code> to{' '}
              <code>{visible(String(p.host))}</code>; the value never enters the workshop.
            </p>
          ) : (
            <p data-testid="secret-mode" data-mode="reveal" className="error">
              <strong>Reveal (riskier)</strong>: the value enters the workshop as a file and a variable; the agent can copy it anywhere its
              allowlist reaches. A request in use mode, naming a host, would keep it outside.
            </p>
          )}
        </section>
      );
    case 'PR_GATEWAY':
      return <PrDiff approval={approval} />;
  }
}

function AllowlistDiff({ approval }: { approval: Approval }) {
  const [workshop, setWorkshop] = useState<Workshop>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    getWorkshop(approval.workshopId).then(setWorkshop, (err: unknown) => setError(err instanceof Error ? err.message : String(err)));
  }, [approval.workshopId]);
  const p = approval.payload;
  const entry = typeof p.entry === 'string' ? p.entry : `${String(p.host ?? '')}${typeof p.port === 'number' ? `:${p.port}` : ''}`;
  const before = workshop ? [...new Set(workshop.egress.policy.filter((e) => e.rule === 'allow').map((e) => e.entry))] : [];
  const after = before.includes(entry) ? before : [...before, entry];
  return (
    <section>
      <h3>Allowlist</h3>
      <p>
        Adds <code data-testid="allowlist-entry">{visible(entry)}</code>
      </p>
      {error && <p className="error">The workshop’s current allowlist could not be read: {error}</p>}
      {workshop && <p className="muted">The workshop’s live allowlist: the server’s, the project’s and what approvals added.</p>}
      {workshop && (
        <div className="before-after">
          <div>
            <h4>Before</h4>
            <ul data-testid="allowlist-before">
              {before.length === 0 ? <li className="muted">(nothing)</li> : before.map((h) => <li key={h}>{visible(h)}</li>)}
            </ul>
          </div>
          <div>
            <h4>After</h4>
            <ul data-testid="allowlist-after">
              {after.map((h) => (
                <li key={h} className={before.includes(h) ? undefined : 'added'}>
                  {visible(h)}
                </li>
              ))}
            </ul>
          </div>
        </div>
      )}
    </section>
  );
}

function PrDiff({ approval }: { approval: Approval }) {
  const p = approval.payload;
  const files = typeof p.diff === 'string' ? splitDiff(p.diff) : [];
  const [split, setSplit] = useState(false);
  return (
    <section>
      <h3>Push</h3>
      <p>
        branch <code>{visible(String(p.branch ?? ''))}</code>
        {typeof p.remote === 'string' && (
          <>
            {' '}
            to <code>{visible(p.remote)}</code>
          </>
        )}
      </p>
      {typeof p.title === 'string' && <p>title: {visible(p.title)}</p>}
      {typeof p.diffStat === 'string' && <pre className="code">{visible(p.diffStat)}</pre>}
      {files.length === 0 ? (
        <p className="muted">No diff was attached.</p>
      ) : (
        <>
          <fieldset className="row view-switch">
            <legend className="sr-only">How the diff is shown</legend>
            <label>
              <input type="radio" name="diff-view" checked={!split} onChange={() => setSplit(false)} /> Unified
            </label>
            <label>
              <input type="radio" name="diff-view" checked={split} onChange={() => setSplit(true)} /> Side by side
            </label>
          </fieldset>
          {files.map((f, i) => (
            <DiffFileView key={i} name={f.name} lines={f.lines} split={split} />
          ))}
        </>
      )}
    </section>
  );
}

function DiffFileView({ name, lines, split }: { name: string; lines: string[]; split: boolean }) {
  const [pages, setPages] = useState(1);
  const { shown, more } = page(lines, DIFF_PAGE, pages);
  const unified = <UnifiedDiff lines={shown} testId="diff" />;
  return (
    <details open className="diff-file">
      <summary>
        <code>{visible(name)}</code>
      </summary>
      {split ? (
        <Suspense fallback={unified}>
          <SplitDiff lines={shown} fallback={unified} />
        </Suspense>
      ) : (
        unified
      )}
      {more > 0 && (
        <button type="button" className="secondary" onClick={() => setPages(pages + 1)}>
          Show {Math.min(more, DIFF_PAGE)} more lines ({more} left)
        </button>
      )}
    </details>
  );
}
