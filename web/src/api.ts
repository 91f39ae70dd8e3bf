/**
 * The dashboard's calls to its own server: same origin, the session cookie (HttpOnly: this code
 * never sees it), and on every write the CSRF token from GET /auth/web/session. No token is kept
 * in localStorage or anywhere else script-readable but memory.
 */
import type { z } from 'zod';
import type * as core from '../../src/core/api.ts';
import type * as schemas from '../../src/core/schemas.ts';
import type * as terminals from '../../src/core/terminals.ts';
import type { ROUTES } from '../../src/core/routes.ts';

export type Role = (typeof core.ROLES)[number];

export interface Session {
  signedIn: true;
  user: { id: string; name: string };
  tenant: string;
  role: Role;
  tenants: { name: string; role: Role }[];
  csrf: { header: string; token: string };
}

export interface SignedOut {
  signedIn: false;
  signIn: { available: true; url: string };
}

// The server's own wire types (zod schemas in src/core), imported as types only: nothing of zod
// or of the server is bundled, and a change there that the app does not follow fails its build.
type Wire<T extends z.ZodType> = z.infer<T>;
export type Approval = Wire<typeof core.ApprovalRequestSchema>;
export type ApprovalCategory = Approval['category'];
export type ApprovalStatus = Approval['status'];
export type AuditEntry = Wire<typeof core.ApprovalAuditEntry>;
export type Workshop = Wire<typeof core.WorkshopSchema>;
/** Its disk against its quota: in the answer of GET /v1/workshops/:id (not of the list), read on the node that runs it. */
export type WorkshopDisk = schemas.WorkshopDisk;
export type EgressEntry = Workshop['egress']['policy'][number];
export type WorkshopUsage = Wire<typeof core.WorkshopUsageSchema>;
/** One decision of the workshop's egress proxy. */
export type EgressRecord = Wire<typeof core.EgressRecord>;
export type Simulator = Wire<typeof core.SimulatorView>;
export type AgentSession = Wire<typeof core.SessionInfo>;
export type SimulatorRequest = z.input<typeof schemas.SimulatorRequest>;
export type CreateWorkshop = z.input<typeof schemas.CreateWorkshopRequest>;
export type CreateFrame = schemas.CreateWorkshopFrame;
export type Project = Wire<typeof core.ProjectView>;
export type CatalogItem = Wire<typeof core.CatalogItemSchema>;
export type ActionPlan = Wire<typeof core.ActionPlanSchema>;
export type PlannedEffect = ActionPlan['effects'][number];
export type ActionExecution = Wire<typeof core.ActionExecutionSchema>;
export type ActionJournal = Wire<typeof core.ActionJournal>;
export type ExecutionSummary = ActionJournal['executions'][number];
export type ConsoleCatalog = Wire<typeof core.ConsoleCatalog>;
export type ConsoleResult = Wire<typeof core.ConsoleResult>;
export type ConsoleRequest = core.ConsoleRequest;
/** The write guard as the browser meets it (ATELIER_COCKPIT_WRITES): apply from the page, or copy the CLI command. */
export type CockpitWrites = 'apply' | 'copy-command';
/** What the PTY WebSocket says in its text frames. */
export type TerminalEvent = terminals.TerminalEvent;

export const APPROVAL_STATUSES: readonly ApprovalStatus[] = ['PENDING', 'APPROVED', 'REJECTED', 'EXPIRED'];
export const APPROVAL_CATEGORIES: readonly ApprovalCategory[] = ['ALLOWLIST_EXPANSION', 'SHELL_COMMAND', 'SECRET_REQUEST', 'PR_GATEWAY'];

export interface ApprovalEvent {
  type: 'created' | 'decided' | 'expired' | 'ready';
  approval?: Approval;
}

/** An answer of the server that is not a success: its code and message, shown as they are. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The server's `details` (the field at fault, the command to copy…), when it sent any. */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** The server's answer to a refused call, as it said it. */
export function said(err: unknown): string {
  return err instanceof ApiError ? `${err.message} (${err.code})` : err instanceof Error ? err.message : String(err);
}

let csrf: Session['csrf'] | undefined;

export function setCsrf(value: Session['csrf'] | undefined): void {
  csrf = value;
}

export async function call<T>(method: string, path: string, body?: unknown, token: Session['csrf'] | undefined = csrf): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json', 'x-atelier-channel': 'dashboard' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && token) headers[token.header] = token.token;
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return answer<T>(res);
}

/** The JSON of an answer, or its error as an ApiError (code and message as the server said them). */
async function answer<T>(res: Response): Promise<T> {
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    const e = (data ?? {}) as { code?: unknown; message?: unknown; details?: unknown };
    throw new ApiError(
      res.status,
      typeof e.code === 'string' ? e.code : 'HTTP_' + res.status,
      typeof e.message === 'string' ? e.message : `the server answered ${res.status}`,
      typeof e.details === 'object' && e.details !== null ? (e.details as Record<string, unknown>) : {},
    );
  }
  return data as T;
}

export const getSession = (): Promise<Session | SignedOut> => call('GET', '/auth/web/session');
/** What waits for the signed-in user: PENDING requests of the workshops they own, or all of the tenant's for a maintainer or admin (the server filters). */
export const listPending = (): Promise<{ items: Approval[] }> => call('GET', '/v1/approvals?status=PENDING&concerns=me&limit=1000');

export interface HistoryFilter {
  status?: ApprovalStatus;
  category?: ApprovalCategory;
  workshop?: string;
}

/** The tenant's requests, newest first, filtered by the server. */
export function listApprovals(f: HistoryFilter, limit = 200): Promise<{ items: Approval[] }> {
  const q = new URLSearchParams({ limit: String(limit) });
  if (f.status) q.set('status', f.status);
  if (f.category) q.set('category', f.category);
  if (f.workshop) q.set('workshop', f.workshop);
  return call('GET', `/v1/approvals?${q}`);
}
/** What a Teams card's link was for, as the server checked it (its signature, its expiry), and the request it names. */
export type LinkCheck = Wire<(typeof ROUTES)['checkApprovalLink']['response']>;

/**
 * Checks a Teams card's link (`?action=…&exp=…&sig=…` of /approvals/ID) with the server, which
 * alone holds its key: the request, or the server's refusal (forged, expired, not yours to see).
 */
export function checkApprovalLink(id: string, search: string): Promise<LinkCheck> {
  const given = new URLSearchParams(search);
  const q = new URLSearchParams();
  for (const name of ['action', 'exp', 'sig']) q.set(name, given.get(name) ?? '');
  return call('GET', `/v1/approvals/${encodeURIComponent(id)}/link?${q}`);
}
export const getApproval = (id: string): Promise<Approval> => call('GET', `/v1/approvals/${encodeURIComponent(id)}`);
export const approvalAudit = (id: string): Promise<{ items: AuditEntry[] }> => call('GET', `/v1/approvals/${encodeURIComponent(id)}/audit`);
export const getWorkshop = (id: string): Promise<Workshop & { disk?: WorkshopDisk }> =>
  call('GET', `/v1/workshops/${encodeURIComponent(id)}`);
/** What the workshop's processes use now (memory, CPU time, processes), read on the node that runs it; null figures come with a note. */
export const getUsage = (id: string): Promise<WorkshopUsage> => call('GET', `/v1/workshops/${encodeURIComponent(id)}/usage`);
export const listWorkshops = (): Promise<{ items: Workshop[] }> => call('GET', '/v1/workshops');
export const egressLog = (id: string, after: number | undefined): Promise<{ items: EgressRecord[] }> =>
  call('GET', `/v1/workshops/${encodeURIComponent(id)}/egress?limit=200${after !== undefined ? `&after=${after}` : ''}`);

/**
 * How long a follow stream may stay silent before it is taken for dead: three of the server's
 * heartbeats (a blank line every 5 s: src/server/routes/workshops/egress.ts). A connection that
 * dies without a word (a network blip, a sleeping laptop, a proxy that drops it) is otherwise
 * noticed only when the server would have ended the stream, up to a minute later.
 */
export const FOLLOW_SILENCE_MS = 15_000;

/** A follow stream that said nothing for FOLLOW_SILENCE_MS: the caller connects again. */
export class SilentStream extends Error {}

/**
 * Follows the workshop's egress log (`?follow=true`, NDJSON): each record after `after` as the
 * proxy decides, handed to `onRecord` in order, until the server ends the stream (it does after at
 * most a minute, so the caller reconnects with the last id and the session is checked again) or
 * `signal` aborts; `onLive` at each chunk the server sends (its heartbeat comes at once, then at
 * least every 5 s). A refused request throws its ApiError; `silenceMs` without a chunk (the
 * answer's headers included) throws SilentStream.
 */
export async function followEgress(
  id: string,
  after: number | undefined,
  onRecord: (r: EgressRecord) => void,
  signal: AbortSignal,
  onLive: () => void = () => undefined,
  silenceMs = FOLLOW_SILENCE_MS,
): Promise<void> {
  // This connection's own abort: the caller's, or the watchdog's when the server goes silent.
  const connection = new AbortController();
  const forward = (): void => connection.abort();
  signal.addEventListener('abort', forward);
  let silent = false;
  let watchdog: ReturnType<typeof setTimeout> | undefined;
  const heard = (): void => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => {
      silent = true;
      connection.abort();
    }, silenceMs);
  };
  try {
    heard();
    const res = await fetch(
      `/v1/workshops/${encodeURIComponent(id)}/egress?follow=true&limit=500${after !== undefined ? `&after=${after}` : ''}`,
      {
        headers: { accept: 'application/x-ndjson', 'x-atelier-channel': 'dashboard' },
        credentials: 'same-origin',
        signal: connection.signal,
      },
    );
    if (!res.ok || !res.body) {
      await answer(res);
      return;
    }
    heard();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      heard();
      onLive();
      buffered += value;
      const lines = buffered.split('\n');
      // A record cut by the stream's end is dropped: the next connection asks again from the last whole one.
      buffered = lines.pop() ?? '';
      for (const line of lines) if (line.trim()) onRecord(JSON.parse(line) as EgressRecord);
    }
  } catch (err) {
    if (silent && !signal.aborted) throw new SilentStream(`no word from the server for ${Math.round(silenceMs / 1000)} s`);
    throw err;
  } finally {
    clearTimeout(watchdog);
    signal.removeEventListener('abort', forward);
  }
}
export const decide = (id: string, decision: 'APPROVE' | 'REJECT', reason: string): Promise<Approval> =>
  call('POST', `/v1/approvals/${encodeURIComponent(id)}/decision`, { decision, reason });
export const stopWorkshop = (id: string): Promise<Workshop> => call('POST', `/v1/workshops/${encodeURIComponent(id)}/stop`);
export const resumeWorkshop = (id: string): Promise<Workshop> => call('POST', `/v1/workshops/${encodeURIComponent(id)}/resume`);
export const deleteWorkshop = (id: string): Promise<{ id: string; deleted: true }> =>
  call('DELETE', `/v1/workshops/${encodeURIComponent(id)}`);
export const listSimulators = (id: string): Promise<{ items: Simulator[] }> =>
  call('GET', `/v1/workshops/${encodeURIComponent(id)}/simulators`);
/** Starts one more simulator in the running workshop (`type`, and `name` when it is not the type's). */
export const requestSimulator = (id: string, body: SimulatorRequest): Promise<Simulator> =>
  call('POST', `/v1/workshops/${encodeURIComponent(id)}/simulators`, body);
/** Stops a simulator (its files kept) until a reset starts it again. */
export const stopSimulator = (id: string, name: string): Promise<Simulator> =>
  call('POST', `/v1/workshops/${encodeURIComponent(id)}/simulators/${encodeURIComponent(name)}/stop`);
/** Returns a simulator to its initial state; a stopped or failed one is started again (fresh state). */
export const resetSimulator = (id: string, name: string): Promise<Simulator> =>
  call('POST', `/v1/workshops/${encodeURIComponent(id)}/simulators/${encodeURIComponent(name)}/reset`);
export const listSessions = (id: string): Promise<{ items: AgentSession[] }> =>
  call('GET', `/v1/workshops/${encodeURIComponent(id)}/sessions`);

/**
 * The dashboard's shell: a session (a PTY that outlives its connection) running the workshop's
 * login shell, so that a dropped connection is attached again with the shell as it was; it is
 * stopped when its terminal is closed.
 */
export async function startShell(id: string): Promise<string> {
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  const name = `shell-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
  const started = await call<AgentSession>('POST', `/v1/workshops/${encodeURIComponent(id)}/sessions`, {
    name,
    command: ['/bin/bash', '-l'],
  });
  return started.name;
}

export const stopSession = (id: string, name: string): Promise<unknown> =>
  call('DELETE', `/v1/workshops/${encodeURIComponent(id)}/sessions/${encodeURIComponent(name)}`);

/**
 * Creates a workshop, telling each phase as it happens (`POST /v1/workshops` as NDJSON); the
 * workshop (Running or Failed) at the end. A request refused before anything exists throws its ApiError.
 */
export async function createWorkshop(body: CreateWorkshop, onPhase: (frame: schemas.CreatePhaseEvent) => void): Promise<Workshop> {
  const headers: Record<string, string> = {
    accept: 'application/x-ndjson',
    'content-type': 'application/json',
    'x-atelier-channel': 'dashboard',
  };
  if (csrf) headers[csrf.header] = csrf.token;
  const res = await fetch('/v1/workshops', { method: 'POST', headers, credentials: 'same-origin', body: JSON.stringify(body) });
  if (!res.ok || !(res.headers.get('content-type') ?? '').includes('ndjson')) return answer<Workshop>(res);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buffered += value;
    const lines = buffered.split('\n');
    buffered = done ? '' : (lines.pop() ?? '');
    for (const line of lines) {
      if (!line.trim()) continue;
      const frame = JSON.parse(line) as CreateFrame;
      if ('workshop' in frame) return frame.workshop as Workshop;
      if ('error' in frame) throw new ApiError(res.status, frame.error.code, frame.error.message);
      onPhase(frame);
    }
    if (done)
      throw new ApiError(res.status, 'UNAVAILABLE', 'the server ended the creation without saying how it went: look at the workshops list');
  }
}

const q = (project: string): string => `project=${encodeURIComponent(project)}`;
export const listProjects = (): Promise<{ items: Project[] }> => call('GET', '/v1/projects');
/** A project's catalog, preconditions evaluated now, and how the server's write guard treats this page. */
export const listActions = (project: string): Promise<{ project: string; items: CatalogItem[]; writes: CockpitWrites }> =>
  call('GET', `/api/workspace/actions?${q(project)}`);
export const actionJournal = (project: string): Promise<ActionJournal> => call('GET', `/api/workspace/actions/journal?${q(project)}`);
/** Plans an action on the project the page has selected (the request names it): nothing changes but the journal's plan line. */
export const planAction = (project: string, actionId: string, parameters: Record<string, unknown>): Promise<ActionPlan> =>
  call('POST', `/api/workspace/actions/${encodeURIComponent(actionId)}/plan`, { project, action_id: actionId, parameters });

/**
 * The cockpit's write guard wants a double-submit token: GET /api/workspace/csrf sets it as the
 * `atelier_csrf` cookie (HttpOnly) and returns it for the header. Asked before each apply and
 * rollback (it is bound to the user and signed with the same key as the session's, so the
 * session's own check accepts it as well).
 */
async function cockpitToken(): Promise<Session['csrf']> {
  const t = await call<{ token: string; header: string }>('GET', '/api/workspace/csrf');
  return { header: t.header, token: t.token };
}
export async function applyPlan(plan: Pick<ActionPlan, 'actionId' | 'planId' | 'fingerprint'>): Promise<ActionExecution> {
  const token = await cockpitToken();
  return call(
    'POST',
    `/api/workspace/actions/${encodeURIComponent(plan.actionId)}/apply`,
    { plan_id: plan.planId, fingerprint: plan.fingerprint },
    token,
  );
}
export async function rollbackExecution(actionId: string, executionId: string): Promise<ActionExecution> {
  const token = await cockpitToken();
  return call('POST', `/api/workspace/actions/${encodeURIComponent(actionId)}/rollback`, { execution_id: executionId }, token);
}
export const consoleCatalog = (): Promise<ConsoleCatalog> => call('GET', '/api/workspace/console');
export const runConsole = (body: ConsoleRequest): Promise<ConsoleResult> => call('POST', '/api/workspace/console', body);

export const switchTenant = (tenant: string): Promise<{ tenant: string }> => call('POST', '/auth/web/tenant', { tenant });
export const signOut = (): Promise<unknown> => call('POST', '/auth/web/logout');

/**
 * Who may operate a workshop (its simulators, their credentials): its owner, a maintainer or an
 * admin of its tenant, as the server decides (it checks again, and redacts credentials for the others).
 */
export const mayOperate = (role: Role, userId: string, workshop: Pick<Workshop, 'ownerId'>): boolean =>
  role === 'maintainer' || role === 'admin' || (role === 'member' && workshop.ownerId === userId);

/** Who may plan, apply and roll back typed actions (D3: maintainers; the server checks again). */
export const mayAct = (role: Role): boolean => role === 'maintainer' || role === 'admin';

/** Who may decide (the server checks again: owner / maintainer / never the requester). */
export const canDecide = (role: Role): boolean => role !== 'viewer';
