import { useEffect, useRef, useState, type FormEvent } from 'react';
import {
  actionJournal,
  ApiError,
  applyPlan,
  consoleCatalog,
  listActions,
  listProjects,
  mayAct,
  planAction,
  rollbackExecution,
  runConsole,
  said,
  type ActionExecution,
  type ActionPlan,
  type CatalogItem,
  type CockpitWrites,
  type ConsoleResult,
  type ExecutionSummary,
  type PlannedEffect,
  type Role,
} from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { copyMode, fieldOf, formParameters, inputKind, planCommand, type Parameter } from './cockpitForm.ts';
import { ListTable } from './ListTable.tsx';
import { UnifiedDiff } from './UnifiedDiff.tsx';
import { countdown } from './pending.ts';
import { navigate } from './router.tsx';
import { useNow } from './usePending.ts';
import { usePoll } from './usePoll.ts';

const CLASS_LABEL: Record<CatalogItem['class'], string> = {
  A: 'A · project configuration',
  B: 'B · local services',
  C: 'C · system components (command to copy)',
};

/** The project named by the page's path (`/cockpit/NAME`): every request of the page names it. */
export function cockpitProject(path: string): string | undefined {
  const m = /^\/cockpit\/([^/]+)$/.exec(path);
  if (!m) return undefined;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return undefined;
  }
}

/**
 * The cockpit (ADR-008): one project at a time, the one chosen here; its catalog of typed
 * actions with their preconditions evaluated now; an action's form, plan, apply, verification
 * and rollback; the journal; and the read-only Console.
 */
export function Cockpit({ path, role, onSignedOut }: { path: string; role: Role; onSignedOut: () => void }) {
  const project = cockpitProject(path);
  const projects = usePoll(listProjects, 10_000, onSignedOut, 'projects');
  const items = projects.data?.items;
  return (
    <section aria-labelledby="cockpit-title" className="cockpit">
      <h1 id="cockpit-title">Cockpit</h1>
      <p className="muted">Typed actions on one project's infrastructure: plan, then apply, verify, and roll back.</p>
      {projects.error && (
        <p role="alert" className="error">
          {visible(projects.error)}
        </p>
      )}
      {!items ? (
        <p className="muted">Loading…</p>
      ) : items.length === 0 ? (
        <p data-testid="no-projects">
          No project is registered in this tenant: a maintainer adds one with <code>atelier projects add PATH</code>.
        </p>
      ) : (
        <div className="filters">
          <label>
            Project{' '}
            <select
              data-testid="project-select"
              value={project ?? ''}
              onChange={(e) => navigate(e.target.value ? `/cockpit/${encodeURIComponent(e.target.value)}` : '/cockpit')}
            >
              <option value="">Choose a project…</option>
              {items.map((p) => (
                <option key={p.id} value={p.name}>
                  {visible(p.name)}
                </option>
              ))}
            </select>
          </label>
          {project !== undefined && (
            <span className="wrap" data-testid="project-path">
              {visible(items.find((p) => p.name === project)?.path ?? '')}
            </span>
          )}
        </div>
      )}
      {project !== undefined && <ProjectCockpit key={project} project={project} role={role} onSignedOut={onSignedOut} />}
      <ConsolePanel />
    </section>
  );
}

function ProjectCockpit({ project, role, onSignedOut }: { project: string; role: Role; onSignedOut: () => void }) {
  const catalog = usePoll(() => listActions(project), 10_000, onSignedOut, `catalog-${project}`);
  const journal = usePoll(() => actionJournal(project), 3000, onSignedOut, `journal-${project}`);
  const [chosen, setChosen] = useState<string>();
  const writes = catalog.data?.writes ?? 'copy-command';
  const item = catalog.data?.items.find((i) => i.id === chosen);
  const changed = (): void => {
    catalog.reload();
    journal.reload();
  };

  return (
    <>
      {catalog.data && writes === 'copy-command' && (
        <p className="notice" data-testid="copy-mode">
          This server does not apply actions from the browser (its write guard is off: <code>ATELIER_COCKPIT_WRITES</code> is not{' '}
          <code>apply</code>). Plans are made here; apply and roll back them with the command shown, in a terminal.
        </p>
      )}
      <section aria-labelledby="catalog-title">
        <h2 id="catalog-title">Actions</h2>
        <ListTable
          items={catalog.data?.items}
          error={catalog.error && visible(catalog.error)}
          empty={<p className="muted">No action.</p>}
          testId="catalog"
          scrollLabel="Actions (scrolls sideways)"
          columns={['Action', 'Class', 'Preconditions (now)', <span className="sr-only">Choose</span>]}
          row={(i) => (
            <tr key={i.id} data-testid={`action-${i.id}`}>
              <td className="wrap">
                <code>{i.id}</code>
                <br />
                <span className="muted">{visible(i.title)}</span>
              </td>
              <td>{CLASS_LABEL[i.class]}</td>
              <td className="wrap">
                <Preconditions list={i.preconditions} />
              </td>
              <td>
                <button
                  type="button"
                  className={chosen === i.id ? undefined : 'secondary'}
                  aria-pressed={chosen === i.id}
                  aria-label={`Choose ${i.id}`}
                  onClick={() => setChosen(i.id)}
                >
                  Choose
                </button>
              </td>
            </tr>
          )}
        />
      </section>
      {item && <ActionPanel key={item.id} project={project} item={item} role={role} writes={writes} onChanged={changed} />}
      <Journal project={project} data={journal.data} error={journal.error} role={role} writes={writes} onChanged={changed} />
    </>
  );
}

function Preconditions({ list }: { list: ActionPlan['preconditions'] }) {
  if (list.length === 0) return <span className="muted">none</span>;
  return (
    <ul className="checks">
      {list.map((p, i) => (
        <li key={i} className={p.ok ? undefined : 'error'}>
          {p.ok ? '✓' : '✗'} {visible(p.name)}
          {p.reason ? `: ${visible(p.reason)}` : ''}
        </li>
      ))}
    </ul>
  );
}

/** An action chosen from the catalog: its parameters form, then its plan, then apply and what it did. */
function ActionPanel({
  project,
  item,
  role,
  writes,
  onChanged,
}: {
  project: string;
  item: CatalogItem;
  role: Role;
  writes: CockpitWrites;
  onChanged: () => void;
}) {
  const [raw, setRaw] = useState<Record<string, string>>(() => Object.fromEntries(item.parameters.map((p) => [p.name, defaultValue(p)])));
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [refusal, setRefusal] = useState<string>();
  const [plan, setPlan] = useState<ActionPlan>();
  const [busy, setBusy] = useState(false);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), []);

  const submit = async (e: FormEvent): Promise<void> => {
    e.preventDefault();
    setRefusal(undefined);
    setPlan(undefined);
    const { parameters, errors: wrong } = formParameters(item.parameters, raw);
    setErrors(wrong);
    if (Object.keys(wrong).length > 0) return;
    setBusy(true);
    try {
      setPlan(await planAction(project, item.id, parameters));
      onChanged();
    } catch (err) {
      // The action's schema is the server's: its message goes to the field it names.
      const field = fieldOf(err, item.parameters);
      if (field) setErrors({ [field]: (err as ApiError).message });
      else setRefusal(said(err));
    } finally {
      setBusy(false);
    }
  };

  const acts = mayAct(role);
  return (
    <section aria-labelledby="action-title" className="card cockpit-action" data-testid="action-panel">
      <h2 id="action-title" ref={heading} tabIndex={-1}>
        <code>{item.id}</code> <span className="muted">({CLASS_LABEL[item.class]})</span>
      </h2>
      <p>{visible(item.title)}</p>
      <p className="muted">Undo: {visible(item.inverse)}</p>
      {!acts ? (
        <p data-testid="may-not-plan">
          Planning and applying an action need the maintainer role in this tenant. A maintainer would run{' '}
          <code>{planCommand(item.id, project, {})}</code>.
        </p>
      ) : (
        <form className="create" onSubmit={(e) => void submit(e)} noValidate aria-label={`Parameters of ${item.id}`}>
          {item.parameters.length === 0 && <p className="muted">This action takes no parameter.</p>}
          {item.parameters.map((p) => (
            <ParameterField
              key={p.name}
              param={p}
              value={raw[p.name] ?? ''}
              error={errors[p.name]}
              onChange={(v) => setRaw({ ...raw, [p.name]: v })}
            />
          ))}
          <div>
            <button type="submit" disabled={busy}>
              {busy ? 'Planning…' : 'Plan'}
            </button>
          </div>
          {refusal && (
            <p role="alert" className="error" data-testid="plan-refused">
              {visible(refusal)}
            </p>
          )}
        </form>
      )}
      {plan && <PlanView key={plan.planId} plan={plan} writes={writes} onChanged={onChanged} />}
    </section>
  );
}

function defaultValue(p: Parameter): string {
  const k = inputKind(p.type);
  return k.kind === 'select' && p.required ? k.options[0]! : '';
}

function ParameterField({
  param,
  value,
  error,
  onChange,
}: {
  param: Parameter;
  value: string;
  error: string | undefined;
  onChange: (v: string) => void;
}) {
  const id = `param-${param.name}`;
  const help = `${id}-help`;
  const err = `${id}-error`;
  const kind = inputKind(param.type);
  const common = {
    id,
    name: param.name,
    'aria-invalid': error ? true : undefined,
    'aria-describedby': error ? `${err} ${help}` : help,
    'aria-required': param.required || undefined,
  } as const;
  return (
    <div className="field">
      <label htmlFor={id}>
        {param.name}
        {param.required ? ' (required)' : ''} <span className="muted">{visible(param.type)}</span>
      </label>
      {kind.kind === 'select' ? (
        <select {...common} value={value} onChange={(e) => onChange(e.target.value)}>
          {!param.required && <option value="">(not set)</option>}
          {kind.options.map((o) => (
            <option key={o} value={o}>
              {o}
            </option>
          ))}
        </select>
      ) : kind.kind === 'json' ? (
        <textarea {...common} rows={4} spellCheck={false} value={value} onChange={(e) => onChange(e.target.value)} />
      ) : (
        <input {...common} type="text" spellCheck={false} autoComplete="off" value={value} onChange={(e) => onChange(e.target.value)} />
      )}
      <span id={help} className="muted">
        {visible(param.description)}
      </span>
      {error && (
        <span id={err} className="error" role="alert" data-testid={`error-${param.name}`}>
          {visible(error)}
        </span>
      )}
    </div>
  );
}

/**
 * A write the user confirms first (apply, rollback): the confirmation step, the call in flight and
 * the server's refusal; the page's data is read again afterwards, whatever came of it.
 */
function useConfirmedWrite(onChanged: () => void) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<{ text: string; command?: string }>();
  const run = async <T,>(call: () => Promise<T>, done: (result: T) => void): Promise<void> => {
    setBusy(true);
    setRefusal(undefined);
    try {
      done(await call());
    } catch (err) {
      setRefusal(refusalOf(err));
    } finally {
      setBusy(false);
      setConfirming(false);
      onChanged();
    }
  };
  return { confirming, setConfirming, busy, refusal, run };
}

/** A plan as the server made it: everything apply would do, then confirm → apply, or the command to copy. */
function PlanView({ plan, writes, onChanged }: { plan: ActionPlan; writes: CockpitWrites; onChanged: () => void }) {
  const now = useNow();
  const { confirming, setConfirming, busy, refusal, run } = useConfirmedWrite(onChanged);
  const [result, setResult] = useState<ActionExecution>();
  const confirmButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (confirming) confirmButton.current?.focus();
  }, [confirming]);
  const left = Date.parse(plan.expiresAt) - now;
  const copy = copyMode(plan.class, writes);

  const apply = (): Promise<void> => run(() => applyPlan(plan), setResult);

  return (
    <section aria-labelledby="plan-title" className="plan" data-testid="plan">
      <h3 id="plan-title">Plan</h3>
      <p data-testid="plan-summary">{visible(plan.summary)}</p>
      <dl className="facts">
        <dt>Project</dt>
        <dd>{visible(plan.project)}</dd>
        <dt>Plan</dt>
        <dd>
          <code data-testid="plan-id">{plan.planId}</code>
        </dd>
        <dt>Fingerprint</dt>
        <dd>
          <code data-testid="fingerprint">{plan.fingerprint}</code>
        </dd>
        <dt>Expires</dt>
        <dd data-testid="plan-expiry">
          {new Date(plan.expiresAt).toLocaleString()} ({left > 0 ? `in ${countdown(left)}` : 'expired: plan again'})
        </dd>
        <dt>Undo</dt>
        <dd>{visible(plan.inverse)}</dd>
      </dl>
      <h4>Preconditions</h4>
      <Preconditions list={plan.preconditions} />
      <h4>Effects, in order</h4>
      <ol className="effects">
        {plan.effects.map((e, i) => (
          <li key={i}>
            <EffectView effect={e} />
          </li>
        ))}
      </ol>
      {plan.class === 'C' ? (
        <div data-testid="class-c">
          <p>Class C: this server never runs it. Copy the command into a terminal of the machine:</p>
          {plan.effects.map((e, i) => (e.kind === 'command' ? <CopyCommand key={i} command={e.copy} /> : null))}
        </div>
      ) : copy ? (
        <div data-testid="copy-apply">
          <p>Apply it from a terminal (the browser does not apply on this server):</p>
          {plan.applyCommand && <CopyCommand command={plan.applyCommand} />}
        </div>
      ) : result ? null : !confirming ? (
        <button type="button" onClick={() => setConfirming(true)} disabled={left <= 0}>
          Apply…
        </button>
      ) : (
        <div className="confirm" role="group" aria-labelledby="confirm-title">
          <p id="confirm-title">
            Apply exactly this plan to <strong>{visible(plan.project)}</strong>? Its effects above happen now, then they are verified.
          </p>
          <div className="row">
            <button type="button" ref={confirmButton} disabled={busy} onClick={() => void apply()}>
              {busy ? 'Applying…' : 'Confirm apply'}
            </button>
            <button type="button" className="secondary" disabled={busy} onClick={() => setConfirming(false)}>
              Cancel
            </button>
          </div>
        </div>
      )}
      {refusal && <Refusal refusal={refusal} />}
      {result && <ExecutionView execution={result} writes={writes} onChanged={onChanged} />}
    </section>
  );
}

function refusalOf(err: unknown): { text: string; command?: string } {
  const command = err instanceof ApiError && typeof err.details.command === 'string' ? err.details.command : undefined;
  return { text: said(err), ...(command ? { command } : {}) };
}

function Refusal({ refusal }: { refusal: { text: string; command?: string } }) {
  return (
    <div role="alert" data-testid="refused">
      <p className="error">{visible(refusal.text)}</p>
      {refusal.command && <CopyCommand command={refusal.command} />}
    </div>
  );
}

function EffectView({ effect }: { effect: PlannedEffect }) {
  if (effect.kind === 'file')
    return (
      <div data-testid="effect-file">
        <p>
          Edit <code>{visible(effect.path)}</code> at <code>{visible(effect.key)}</code>{' '}
          <span className="muted">
            ({effect.beforeSha256 ? `sha256 ${effect.beforeSha256.slice(0, 12)}…` : 'new file'} → sha256 {effect.afterSha256.slice(0, 12)}…)
          </span>
        </p>
        <UnifiedDiff lines={effect.diff.split('\n')} testId="plan-diff" />
      </div>
    );
  if (effect.kind === 'command')
    return (
      <div data-testid="effect-command">
        <p>Command (never run here){effect.network ? <strong> · reaches the network</strong> : ' · no network'}:</p>
        <Argv argv={effect.argv} />
      </div>
    );
  return (
    <div data-testid="effect-service">
      <p>
        Service <code>{visible(effect.stack)}</code>: {effect.operation}
        {effect.network ? <strong> · reaches the network (may pull an image)</strong> : ' · no network'}
      </p>
      <Argv argv={effect.argv} />
    </div>
  );
}

/** An exact argv, one word per item (what runs, not a shell line). */
function Argv({ argv }: { argv: readonly string[] }) {
  return (
    <ol className="argv" aria-label="argv, word by word" data-testid="argv">
      {argv.map((w, i) => (
        <li key={i}>
          <code>{visible(w)}</code>
        </li>
      ))}
    </ol>
  );
}

/** A command to run in a terminal, with a button that copies it. */
function CopyCommand({ command }: { command: string }) {
  const [copied, setCopied] = useState<string>();
  const copy = async (): Promise<void> => {
    try {
      await navigator.clipboard.writeText(command);
      setCopied('Copied.');
    } catch {
      setCopied('The browser refused the clipboard: select the command and copy it.');
    }
  };
  return (
    <div className="copy">
      <pre className="code" data-testid="copy-command">
        {visible(command)}
      </pre>
      <button type="button" className="secondary" onClick={() => void copy()}>
        Copy the command
      </button>{' '}
      <span role="status">{copied}</span>
    </div>
  );
}

/** What an apply or a rollback did: its status, its effects, its verification, and the rollback it offers. */
function ExecutionView({ execution, writes, onChanged }: { execution: ActionExecution; writes: CockpitWrites; onChanged: () => void }) {
  const [rolled, setRolled] = useState<ActionExecution>();
  return (
    <div className="execution" data-testid="execution">
      <h4>
        Result: <span data-testid="execution-status">{execution.status}</span>
      </h4>
      <p>{visible(execution.message)}</p>
      <p className="muted">
        Execution <code>{execution.executionId}</code>
      </p>
      <Verification verification={execution.verification} />
      {execution.rollbackOffered && !rolled && (
        <Rollback
          actionId={execution.actionId}
          executionId={execution.executionId}
          writes={writes}
          onDone={setRolled}
          onChanged={onChanged}
        />
      )}
      {rolled && (
        <div data-testid="rollback-result">
          <h4>
            Rollback: <span data-testid="rollback-status">{rolled.status}</span>
          </h4>
          <p>{visible(rolled.message)}</p>
          <Verification verification={rolled.verification} />
        </div>
      )}
    </div>
  );
}

function Verification({ verification }: { verification: ActionExecution['verification'] }) {
  return (
    <div data-testid="verification">
      <p className={verification.ok ? 'ok' : 'error'}>Verification {verification.ok ? 'passed' : 'failed'}</p>
      <Preconditions list={verification.checks.map((c) => ({ name: c.name, ok: c.ok, reason: c.detail }))} />
    </div>
  );
}

/** The rollback of one execution: a button (with a confirmation), or the command when the page may not write. */
function Rollback({
  actionId,
  executionId,
  writes,
  onDone,
  onChanged,
}: {
  actionId: string;
  executionId: string;
  writes: CockpitWrites;
  onDone: (e: ActionExecution) => void;
  onChanged: () => void;
}) {
  const { confirming, setConfirming, busy, refusal, run } = useConfirmedWrite(onChanged);
  if (writes === 'copy-command') return <CopyCommand command={`atelier actions rollback ${executionId}`} />;
  const rollback = (): Promise<void> => run(() => rollbackExecution(actionId, executionId), onDone);
  return (
    <div>
      {!confirming ? (
        <button type="button" className="danger" onClick={() => setConfirming(true)} aria-label={`Roll back ${executionId}`}>
          Roll back…
        </button>
      ) : (
        <div className="row" role="group" aria-label={`Confirm the rollback of ${executionId}`}>
          <button type="button" className="danger" autoFocus disabled={busy} onClick={() => void rollback()}>
            {busy ? 'Rolling back…' : 'Confirm rollback'}
          </button>
          <button type="button" className="secondary" disabled={busy} onClick={() => setConfirming(false)}>
            Cancel
          </button>
        </div>
      )}
      {refusal && <Refusal refusal={refusal} />}
    </div>
  );
}

/** The project's journal: each execution, its status and what can be undone; the raw events behind a disclosure. */
function Journal({
  project,
  data,
  error,
  role,
  writes,
  onChanged,
}: {
  project: string;
  data: Awaited<ReturnType<typeof actionJournal>> | undefined;
  error: string | undefined;
  role: Role;
  writes: CockpitWrites;
  onChanged: () => void;
}) {
  const [results, setResults] = useState<Record<string, ActionExecution>>({});
  const executions = data ? [...data.executions].reverse() : undefined;
  return (
    <section aria-labelledby="journal-title">
      <h2 id="journal-title">Journal</h2>
      <p className="muted">
        <code>{visible(project)}</code>: <code>.atelier/runtime/actions/journal.jsonl</code>, newest first.
      </p>
      {data?.tornLastLine && <p className="error">The journal's last line is torn (a write was interrupted): it is ignored.</p>}
      {data && data.unreadableLines.length > 0 && <p className="error">Unreadable lines: {data.unreadableLines.join(', ')}</p>}
      <ListTable
        items={executions}
        error={error && visible(error)}
        empty={<p className="muted">Nothing was applied yet.</p>}
        testId="journal"
        scrollLabel="Executions (scrolls sideways)"
        columns={['Execution', 'Action', 'Status', 'Started', 'Verification', <span className="sr-only">Undo</span>]}
        row={(x: ExecutionSummary) => (
          <tr key={x.executionId} data-testid={`execution-${x.executionId}`}>
            <td className="wrap">
              <code>{x.executionId}</code>
            </td>
            <td>
              <code>{visible(x.actionId)}</code> ({visible(x.class)})
            </td>
            <td data-testid="journal-status">{visible(x.status)}</td>
            <td>{new Date(x.startedAt).toLocaleString()}</td>
            <td>{x.verification ? (x.verification.ok === true ? 'passed' : 'failed') : '—'}</td>
            <td>
              {results[x.executionId] ? (
                <span role="status">rolled back: {results[x.executionId]!.status}</span>
              ) : x.rollbackOffered && mayAct(role) ? (
                <Rollback
                  actionId={x.actionId}
                  executionId={x.executionId}
                  writes={writes}
                  onDone={(e) => setResults({ ...results, [x.executionId]: e })}
                  onChanged={onChanged}
                />
              ) : null}
            </td>
          </tr>
        )}
      />
      {data && data.entries.length > 0 && (
        <details>
          <summary>Every event ({data.entries.length})</summary>
          <pre className="code" data-testid="journal-entries">
            {data.entries.map((e) => visible(JSON.stringify(e))).join('\n')}
          </pre>
        </details>
      )}
    </section>
  );
}

/** The Console (D5): one command of the server's fixed, read-only list, run with the caller's own rights. */
function ConsolePanel() {
  const [allowed, setAllowed] = useState<{ command: string; arguments: string[]; flags: string[] }[]>();
  const [error, setError] = useState<string>();
  const [command, setCommand] = useState('');
  const [args, setArgs] = useState('');
  const [output, setOutput] = useState<'table' | 'json' | 'yaml'>('table');
  const [result, setResult] = useState<ConsoleResult>();
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    consoleCatalog().then(
      (c) => {
        setAllowed(c.allowed);
        setCommand(c.allowed[0]?.command ?? '');
      },
      (err: unknown) => setError(said(err)),
    );
  }, []);
  const entry = allowed?.find((c) => c.command === command);
  const run = async (e: FormEvent): Promise<void> => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      setResult(await runConsole({ argv: [...command.split(' '), ...args.split(/\s+/).filter(Boolean)], output }));
    } catch (err) {
      setResult(undefined);
      setError(said(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section aria-labelledby="console-title">
      <h2 id="console-title">Console</h2>
      <p className="muted">Read-only: one command of the server's fixed list, run with your own rights.</p>
      {allowed && (
        <form className="create" onSubmit={(e) => void run(e)} aria-label="Console command">
          <div className="grid4">
            <label>
              Command
              <select value={command} onChange={(e) => setCommand(e.target.value)} data-testid="console-command">
                {allowed.map((c) => (
                  <option key={c.command} value={c.command}>
                    atelier {c.command}
                  </option>
                ))}
              </select>
            </label>
            <label>
              Arguments and flags
              <input
                type="text"
                value={args}
                spellCheck={false}
                autoComplete="off"
                onChange={(e) => setArgs(e.target.value)}
                aria-describedby="console-help"
              />
            </label>
            <label>
              Output
              <select value={output} onChange={(e) => setOutput(e.target.value as 'table' | 'json' | 'yaml')}>
                <option value="table">table</option>
                <option value="json">json</option>
                <option value="yaml">yaml</option>
              </select>
            </label>
          </div>
          <span id="console-help" className="muted">
            {entry
              ? `takes ${entry.arguments.length ? entry.arguments.join(' ') : 'no argument'}${entry.flags.length ? `; flags ${entry.flags.join(' ')}` : ''}`
              : ''}
          </span>
          <div>
            <button type="submit" disabled={busy || !command}>
              {busy ? 'Running…' : 'Run'}
            </button>
          </div>
        </form>
      )}
      {error && (
        <p role="alert" className="error" data-testid="console-error">
          {visible(error)}
        </p>
      )}
      {result && (
        <div data-testid="console-result">
          <p className="muted">
            <code>atelier {visible(result.argv.join(' '))}</code>: exit {result.exitCode ?? '—'}
            {result.timedOut ? ' (timed out)' : ''}
            {result.truncated ? ' (output cut)' : ''}
          </p>
          <pre className="code" data-testid="console-stdout">
            {visible(result.stdout)}
          </pre>
          {result.stderr && <pre className="code error">{visible(result.stderr)}</pre>}
        </div>
      )}
    </section>
  );
}
