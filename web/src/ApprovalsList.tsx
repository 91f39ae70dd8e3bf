import type { Approval } from './api.ts';
import { countdown } from './pending.ts';

export const CATEGORY_LABEL: Record<Approval['category'], string> = {
  ALLOWLIST_EXPANSION: 'Network access',
  SECRET_REQUEST: 'Secret',
  SHELL_COMMAND: 'Command',
  PR_GATEWAY: 'Push / pull request',
};

/** A one-line preview of agent text: shown as text, cut, control and bidi characters made visible. */
export function preview(value: unknown, max = 140): string {
  const s = visible(String(value ?? ''));
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** Control and bidirectional-override characters shown as their code point, so they cannot reorder or hide text. */
export function visible(s: string): string {
  return s.replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g,
    (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`,
  );
}

export function ApprovalsList({
  items,
  now,
  live,
  error,
  onOpen,
}: {
  items: Approval[];
  now: number;
  live: boolean;
  error: string | undefined;
  onOpen: (id: string) => void;
}) {
  return (
    <section aria-labelledby="pending-title">
      <h1 id="pending-title">Waiting for a decision</h1>
      <p className="muted" data-testid="live">
        {live ? 'Live: new requests appear here as they are filed.' : 'Connecting to the live feed…'}
      </p>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {items.length === 0 ? (
        <p data-testid="none-pending">Nothing waits for a decision.</p>
      ) : (
        <ul className="cards" data-testid="pending-list">
          {items.map((a) => (
            <li key={a.id} className="card">
              <div className="row">
                <span className="tag">{CATEGORY_LABEL[a.category]}</span>
                <span>
                  workshop <code>{a.workshopId}</code>
                </span>
                <span>by {a.requestedBy}</span>
                <span className="muted">expires in {countdown(Date.parse(a.expiresAt) - now)}</span>
              </div>
              <p className="justification">{preview(a.payload.justification)}</p>
              <button type="button" onClick={() => onOpen(a.id)} aria-label={`Open request ${a.id}`}>
                Open
              </button>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
