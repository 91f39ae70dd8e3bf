import { useState, type FormEvent } from 'react';
import { createWorkshop, said, type CreateWorkshop, type Workshop } from './api.ts';
import { visible } from './ApprovalsList.tsx';

/**
 * A new workshop: what `POST /v1/workshops` takes (repository, name, devcontainer, simulators,
 * budget, limits). The server checks every field and says which is wrong; the phases of the
 * creation are shown as they happen.
 */
export function CreateWorkshopForm({ onCancel, onCreated }: { onCancel: () => void; onCreated: (w: Workshop) => void }) {
  const [f, setF] = useState({
    repo: '',
    name: '',
    devcontainer: '',
    simulators: '',
    budget: '',
    cpus: '',
    memory: '',
    pids: '',
    disk: '',
  });
  const [busy, setBusy] = useState(false);
  const [phases, setPhases] = useState<string[]>([]);
  const [answer, setAnswer] = useState<string>();
  const field = (k: keyof typeof f, label: string, hint?: string) => (
    <label>
      {label}
      {hint && <span className="muted"> ({hint})</span>}
      <input name={k} value={f[k]} onChange={(e) => setF({ ...f, [k]: e.target.value })} autoComplete="off" />
    </label>
  );

  const submit = async (e: FormEvent): Promise<void> => {
    e.preventDefault();
    const body: CreateWorkshop = { repo: f.repo.trim() };
    const num = (v: string): number | undefined => (v.trim() === '' ? undefined : Number(v));
    if (f.name.trim()) body.name = f.name.trim();
    if (f.devcontainer.trim()) body.devcontainer = f.devcontainer.trim();
    const sims = f.simulators
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    if (sims.length) body.simulators = sims.map((type) => ({ type }));
    const budget = num(f.budget);
    if (budget !== undefined) body.budgetUsd = budget;
    const cpus = num(f.cpus);
    if (cpus !== undefined) body.cpus = cpus;
    if (f.memory.trim()) body.memory = f.memory.trim();
    const pids = num(f.pids);
    if (pids !== undefined) body.pids = pids;
    if (f.disk.trim()) body.disk = f.disk.trim();
    setBusy(true);
    setAnswer(undefined);
    setPhases([]);
    try {
      const w = await createWorkshop(body, (p) =>
        setPhases((list) => [...list, `${p.phase}${p.step ? ` ${p.step}` : ''}: ${p.state}${p.ms !== undefined ? ` (${p.ms} ms)` : ''}`]),
      );
      if (w.status === 'Running') onCreated(w);
      else setAnswer(`the workshop ${w.id} is ${w.status}${w.statusReason ? `: ${w.statusReason}` : ''}`);
    } catch (err) {
      setAnswer(said(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <form className="create" onSubmit={(e) => void submit(e)} aria-label="New workshop" data-testid="create-workshop">
      <h2>New workshop</h2>
      {field('repo', 'Repository', 'a path on the server, https://, ssh:// or git@ URL')}
      {field('name', 'Name', 'optional: lowercase letters, digits and -')}
      {field('devcontainer', 'Devcontainer', 'optional: path of devcontainer.json in the repository')}
      {field('simulators', 'Simulators', 'optional: types, separated by commas')}
      {field('budget', 'Budget in USD', 'optional')}
      <div className="grid4">
        {field('cpus', 'CPUs', 'e.g. 2')}
        {field('memory', 'Memory', 'e.g. 4g')}
        {field('pids', 'Processes', 'e.g. 512')}
        {field('disk', 'Disk', 'e.g. 10g')}
      </div>
      <div className="row">
        <button type="submit" disabled={busy || f.repo.trim() === ''}>
          {busy ? 'Creating…' : 'Create'}
        </button>
        <button type="button" className="secondary" disabled={busy} onClick={onCancel}>
          Cancel
        </button>
      </div>
      {phases.length > 0 && (
        <ol className="phases" data-testid="create-phases">
          {phases.map((p, i) => (
            <li key={i}>{visible(p)}</li>
          ))}
        </ol>
      )}
      {answer && (
        <p role="alert" className="error" data-testid="create-answer">
          {visible(answer)}
        </p>
      )}
    </form>
  );
}
