import type { Approval, ApprovalEvent } from './api.js';

/**
 * What the banner shows: the PENDING requests the user may see, kept from the list the server
 * returns and the stream's events. Pure functions: the hook in usePending.ts holds the state.
 */
export interface PendingState {
  /** PENDING requests by id. */
  pending: ReadonlyMap<string, Approval>;
  /** Requests seen leaving PENDING (decided or expired), latest first: an open modal shows how. */
  ended: ReadonlyMap<string, Approval>;
}

export const EMPTY: PendingState = { pending: new Map(), ended: new Map() };
const ENDED_KEPT = 200;

/** The server's list (PENDING only) replaces what was known, except what events since have ended. */
export function fromList(state: PendingState, items: readonly Approval[], endedSince: ReadonlySet<string>): PendingState {
  const pending = new Map<string, Approval>();
  for (const a of items) if (a.status === 'PENDING' && !endedSince.has(a.id)) pending.set(a.id, a);
  return { pending, ended: state.ended };
}

export function applyEvent(state: PendingState, event: ApprovalEvent): PendingState {
  const a = event.approval;
  if (!a || event.type === 'ready') return state;
  const pending = new Map(state.pending);
  if (a.status === 'PENDING' && event.type === 'created') {
    pending.set(a.id, a);
    return { pending, ended: state.ended };
  }
  pending.delete(a.id);
  const ended = new Map([[a.id, a], ...[...state.ended].filter(([id]) => id !== a.id).slice(0, ENDED_KEPT - 1)]);
  return { pending, ended };
}

/** How many wait, and the soonest expiry, as of `now` (a request past its expiry no longer counts). */
export function summary(state: PendingState, now: number): { count: number; soonest: number | undefined; items: Approval[] } {
  const items = [...state.pending.values()]
    .filter((a) => Date.parse(a.expiresAt) > now)
    .sort((x, y) => Date.parse(x.expiresAt) - Date.parse(y.expiresAt));
  return { count: items.length, soonest: items[0] ? Date.parse(items[0].expiresAt) : undefined, items };
}

/** `1 h 02 min`, `4 min 05 s`, `9 s`, or `expired`. */
export function countdown(ms: number): string {
  if (ms <= 0) return 'expired';
  const s = Math.floor(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h} h ${String(m).padStart(2, '0')} min`;
  if (m > 0) return `${m} min ${String(sec).padStart(2, '0')} s`;
  return `${sec} s`;
}

/** A unified diff split per file, each file's lines in pages of `pageSize`. */
export interface DiffFile {
  name: string;
  lines: string[];
}

export function splitDiff(diff: string): DiffFile[] {
  const files: DiffFile[] = [];
  let current: DiffFile | undefined;
  for (const line of diff.split('\n')) {
    const m = /^diff --git a\/(.*) b\/(.*)$/.exec(line);
    if (m || !current) {
      current = { name: m ? (m[2] ?? m[1] ?? '?') : '(diff)', lines: [] };
      files.push(current);
      if (m) continue;
    }
    current.lines.push(line);
  }
  return files.filter((f) => f.lines.length > 0 || f.name !== '(diff)');
}

export function page<T>(lines: readonly T[], pageSize: number, pages: number): { shown: T[]; more: number } {
  const end = Math.min(lines.length, pageSize * pages);
  return { shown: lines.slice(0, end), more: lines.length - end };
}

/**
 * What a decision did, as far as the server knows (the request's `effect`): `applied` (the
 * domain added, the branch pushed, the grant made, the command run), `failed` (the effect's own
 * error), `waiting` (approved, the effect not applied yet: polled again), or `none` (nothing to
 * apply: pending, rejected, expired). The text is for the page; agent text in it is shown as text.
 */
export interface EffectShown {
  state: 'applied' | 'failed' | 'waiting' | 'none';
  text: string;
}

export function effectOf(a: Approval): EffectShown {
  if (a.status !== 'APPROVED')
    return { state: 'none', text: a.status === 'PENDING' ? 'not decided yet' : `nothing was applied (${a.status.toLowerCase()})` };
  if (a.effect.error !== null) return { state: 'failed', text: `failed: ${a.effect.error}` };
  const p = a.payload;
  const str = (v: unknown): string => (typeof v === 'string' ? v : '');
  if (a.effect.appliedAt === null)
    return {
      state: 'waiting',
      text: a.category === 'SHELL_COMMAND' ? 'approved: waiting for the agent to run the command' : 'approved: being applied…',
    };
  const at = ` (${new Date(a.effect.appliedAt).toLocaleString()})`;
  switch (a.category) {
    case 'ALLOWLIST_EXPANSION':
      return { state: 'applied', text: `domain added: ${str(p.entry) || str(p.host)} is in the workshop's allowlist${at}` };
    case 'PR_GATEWAY':
      return { state: 'applied', text: `branch pushed: ${str(p.branch)}${str(p.remote) ? ` to ${str(p.remote)}` : ''}${at}` };
    case 'SECRET_REQUEST':
      return {
        state: 'applied',
        text: `grant made: ${str(p.name)} for ${typeof p.ttlSeconds === 'number' ? countdown(p.ttlSeconds * 1000) : 'the default duration'}${
          p.mode === 'use' ? `, sent by the egress proxy to ${str(p.host)}` : ', revealed in the workshop'
        }${at}`,
      };
    case 'SHELL_COMMAND':
      return { state: 'applied', text: `command ran${at}` };
  }
}
