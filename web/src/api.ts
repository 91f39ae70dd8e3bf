/**
 * The dashboard's calls to its own server: same origin, the session cookie (HttpOnly: this code
 * never sees it), and on every write the CSRF token from GET /auth/web/session. No token is kept
 * in localStorage or anywhere else script-readable but memory.
 */
export type Role = 'viewer' | 'member' | 'maintainer' | 'admin';

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
  signIn: { available: true; url: string } | { available: false; reason: string };
}

export type ApprovalCategory = 'ALLOWLIST_EXPANSION' | 'SECRET_REQUEST' | 'SHELL_COMMAND' | 'PR_GATEWAY';
export type ApprovalStatus = 'PENDING' | 'APPROVED' | 'REJECTED' | 'EXPIRED';

export interface Approval {
  id: string;
  workshopId: string;
  category: ApprovalCategory;
  requestedBy: string;
  payload: Record<string, unknown>;
  status: ApprovalStatus;
  decidedBy: string | null;
  decisionReason: string | null;
  createdAt: string;
  expiresAt: string;
  decidedAt: string | null;
  effect: { appliedAt: string | null; error: string | null };
}

export interface ApprovalEvent {
  type: 'created' | 'decided' | 'expired' | 'ready';
  approval?: Approval;
}

export interface Workshop {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
  repo: string;
  limits: { cpus: number; memoryBytes: number; pids: number };
  budgetUsd: number | null;
  /** `policy`: the live policy the workshop's proxy applies, each entry with where it came from. */
  egress: { allow: string[]; deny: string[]; policy: EgressEntry[] };
  warnings: string[];
  createdAt: string;
}

export interface EgressEntry {
  rule: 'allow' | 'deny' | 'allowRange';
  entry: string;
  origin: 'platform' | 'project' | 'approval';
  approval: { requestId: string | null; decidedBy: string | null; decidedAt: string | null } | null;
}

/** One decision of the workshop's egress proxy. */
export interface EgressRecord {
  id: number;
  at: string;
  protocol: string;
  host: string;
  port: number;
  allowed: boolean;
  outcome: string;
  reason: string;
  message: string;
  approvalId: string | null;
}

/** An answer of the server that is not a success: its code and message, shown as they are. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrf: Session['csrf'] | undefined;

export function setCsrf(value: Session['csrf'] | undefined): void {
  csrf = value;
}

export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json', 'x-atelier-channel': 'dashboard' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrf) headers[csrf.header] = csrf.token;
  const res = await fetch(path, {
    method,
    headers,
    credentials: 'same-origin',
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    const e = (data ?? {}) as { code?: unknown; message?: unknown };
    throw new ApiError(
      res.status,
      typeof e.code === 'string' ? e.code : 'HTTP_' + res.status,
      typeof e.message === 'string' ? e.message : `the server answered ${res.status}`,
    );
  }
  return data as T;
}

export const getSession = (): Promise<Session | SignedOut> => call('GET', '/auth/web/session');
export const listPending = (): Promise<{ items: Approval[] }> => call('GET', '/v1/approvals?status=PENDING&limit=1000');
export const getWorkshop = (id: string): Promise<Workshop> => call('GET', `/v1/workshops/${encodeURIComponent(id)}`);
export const listWorkshops = (): Promise<{ items: Workshop[] }> => call('GET', '/v1/workshops');
export const egressLog = (id: string, after: number | undefined): Promise<{ items: EgressRecord[] }> =>
  call('GET', `/v1/workshops/${encodeURIComponent(id)}/egress?limit=200${after !== undefined ? `&after=${after}` : ''}`);
export const decide = (id: string, decision: 'APPROVE' | 'REJECT', reason: string): Promise<Approval> =>
  call('POST', `/v1/approvals/${encodeURIComponent(id)}/decision`, { decision, reason });
export const switchTenant = (tenant: string): Promise<{ tenant: string }> => call('POST', '/auth/web/tenant', { tenant });
export const signOut = (): Promise<unknown> => call('POST', '/auth/web/logout');

/** Who may decide (the server checks again: owner / maintainer / never the requester). */
export const canDecide = (role: Role): boolean => role !== 'viewer';
