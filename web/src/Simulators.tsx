import { useState } from 'react';
import { listSimulators, requestSimulator, resetSimulator, said, stopSimulator, type Simulator } from './api.ts';
import { visible } from './ApprovalsList.tsx';
import { usePoll } from './usePoll.ts';

const POLL_MS = 2000;

function bytes(n: number): string {
  return n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${Math.round(n / 2 ** 20)} MiB`;
}

/** The server's answer to the last action, shown as text (its own message and code when it refused). */
interface Answer {
  kind: 'ok' | 'error';
  text: string;
}

/**
 * The buttons a simulator in `status` offers: a stopped or failed one starts again (a reset starts
 * it from its declaration); a running one resets or stops.
 */
function simulatorActions(
  status: string,
): { label: string; call: (workshopId: string, name: string) => Promise<Simulator>; secondary?: boolean }[] {
  if (status === 'Stopped' || status === 'Failed') return [{ label: 'Start', call: resetSimulator }];
  return [
    { label: 'Reset', call: resetSimulator, secondary: true },
    { label: 'Stop', call: stopSimulator, secondary: true },
  ];
}

/**
 * A workshop's simulators: name, kind, state, endpoint, memory. Those who may operate the
 * workshop (`operate`: its owner, a maintainer or admin of its tenant) also get their connection
 * variables (credentials included) and the start, reset and stop buttons (a stopped or failed
 * one is started by a reset: fresh state); the others see names and
 * states only (the server redacts the credentials it sends them anyway, and refuses their actions).
 */
export function Simulators({ workshopId, operate, onSignedOut }: { workshopId: string; operate: boolean; onSignedOut: () => void }) {
  const { data, error, reload } = usePoll(() => listSimulators(workshopId), POLL_MS, onSignedOut, `sim-${workshopId}`);
  const [busy, setBusy] = useState<string>();
  const [answer, setAnswer] = useState<Answer>();

  const run = async (what: string, f: () => Promise<Simulator>): Promise<void> => {
    setBusy(what);
    setAnswer(undefined);
    try {
      const s = await f();
      setAnswer({ kind: 'ok', text: `${s.name}: ${s.status}${s.statusReason ? ` (${s.statusReason})` : ''}` });
    } catch (err) {
      setAnswer({ kind: 'error', text: said(err) });
    } finally {
      setBusy(undefined);
      reload();
    }
  };

  return (
    <section aria-labelledby="sim-title">
      <h2 id="sim-title">Simulators</h2>
      {error && <p className="error">{visible(error)}</p>}
      {data &&
        (data.items.length === 0 ? (
          <p className="muted" data-testid="simulators-empty">
            No simulator.
          </p>
        ) : (
          <div className="table-wrap">
            <table data-testid="simulators">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Type</th>
                  <th scope="col">Status</th>
                  <th scope="col">Endpoint (inside the workshop)</th>
                  <th scope="col">Memory</th>
                  {operate && <th scope="col">Connection</th>}
                  {operate && (
                    <th scope="col">
                      <span className="sr-only">Actions</span>
                    </th>
                  )}
                </tr>
              </thead>
              <tbody>
                {data.items.map((s) => (
                  <tr key={s.name} data-testid={`simulator-${s.name}`}>
                    <td>{visible(s.name)}</td>
                    <td>
                      {visible(s.type)}
                      {s.version ? ` ${visible(s.version)}` : ''}
                    </td>
                    <td data-testid="simulator-status">
                      {visible(s.status)}
                      {s.statusReason ? `: ${visible(s.statusReason)}` : ''}
                    </td>
                    <td>{s.endpoint ? <code>{`${visible(s.endpoint.host)}:${s.endpoint.port}`}</code> : '—'}</td>
                    <td>{s.memoryBytes === null ? '—' : bytes(s.memoryBytes)}</td>
                    {operate && (
                      <td className="wrap">
                        {Object.keys(s.env).length === 0 ? (
                          '—'
                        ) : (
                          <details>
                            <summary>Show the variables (credentials)</summary>
                            <pre className="code" data-testid="simulator-env">
                              {Object.entries(s.env)
                                .map(([k, v]) => `${visible(k)}=${visible(v)}`)
                                .join('\n')}
                            </pre>
                          </details>
                        )}
                      </td>
                    )}
                    {operate && (
                      <td>
                        <div className="row">
                          {simulatorActions(s.status).map(({ label, call, secondary }) => (
                            <button
                              key={label}
                              type="button"
                              className={secondary ? 'secondary' : undefined}
                              disabled={busy !== undefined}
                              aria-label={`${label} ${s.name}`}
                              onClick={() => void run(s.name, () => call(workshopId, s.name))}
                            >
                              {label}
                            </button>
                          ))}
                        </div>
                      </td>
                    )}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ))}
      {operate && (
        <StartSimulator disabled={busy !== undefined} onStart={(req) => void run('start', () => requestSimulator(workshopId, req))} />
      )}
      {busy && <p className="muted">working…</p>}
      {answer && (
        <p role={answer.kind === 'error' ? 'alert' : 'status'} className={answer.kind} data-testid="simulator-answer">
          {visible(answer.text)}
        </p>
      )}
    </section>
  );
}

/** One more simulator in the running workshop: its type (postgres, redis, wiremock, localstack) and, optionally, its own name. */
function StartSimulator({ disabled, onStart }: { disabled: boolean; onStart: (req: { type: string; name?: string }) => void }) {
  const [type, setType] = useState('');
  const [name, setName] = useState('');
  return (
    <form
      className="row"
      aria-label="Start a simulator"
      onSubmit={(e) => {
        e.preventDefault();
        onStart({ type: type.trim(), ...(name.trim() ? { name: name.trim() } : {}) });
      }}
    >
      <label>
        Type <input value={type} onChange={(e) => setType(e.target.value)} placeholder="postgres, redis, wiremock, localstack" required />
      </label>
      <label>
        Name <input value={name} onChange={(e) => setName(e.target.value)} placeholder="optional: the type's" />
      </label>
      <button type="submit" disabled={disabled}>
        Start simulator
      </button>
    </form>
  );
}
