import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { AtelierError } from '../core/index.js';
import { queryRows, withTransaction, type Pool } from '../db/index.js';
import type { Authenticator, Principal } from '../identity/index.js';

/** The cookie that names a dashboard session (HttpOnly, SameSite=Strict, Secure over TLS). */
export const SESSION_COOKIE = 'atelier_session';
/** The cookie that carries a sign-in in progress (state, PKCE verifier) between /auth/web/login and the callback. */
const LOGIN_COOKIE = 'atelier_login';
const LOGIN_TTL_SECONDS = 600;
/** A dashboard session lasts at most this long, whatever the refresh token would allow. */
const SESSION_TTL_SECONDS = 12 * 3600;
/** The access token is refreshed when it has less than this left. */
const REFRESH_MARGIN_MS = 60_000;

/** What the identity runtime offers the dashboard's sign-in: the embedded issuer or an external one. */
export interface WebSignIn {
  clientId: string;
  /** The scopes asked for (an external issuer gives a refresh token only with `offline_access`, as a rule). */
  scope: string;
  redirectUri(): string;
  /** The issuer's endpoints (an external one's from its discovery document; no revocation endpoint is allowed). */
  endpoints(): Promise<{ authorization_endpoint: string; token_endpoint: string; revocation_endpoint?: string }>;
  /** Posts a form to one of the issuer's endpoints (in-process for the embedded issuer). */
  dispatch(url: string, form: string, ip?: string): Promise<{ status: number; body: string }>;
}

export interface BrowserSessionDeps {
  pool: Pool;
  authenticator: Authenticator;
  sealer: { encrypt(plain: string, context: string): string; decrypt(sealed: string, context: string): Buffer };
  /** Signs the sign-in-in-progress cookie. */
  key: string;
  /** Undefined while the server starts. */
  web(): WebSignIn | undefined;
  /** The server's public origin, known once it listens: cookies get `Secure` when it is https. */
  origin(): string | undefined;
}

interface SessionRow {
  id_hash: string;
  user_id: string;
  tenant_name: string | null;
  access_token_sealed: string;
  access_expires_at: Date;
  refresh_token_sealed: string;
}

interface TokenAnswer {
  access_token?: string;
  refresh_token?: string;
  expires_in?: number;
  error?: string;
  error_description?: string;
}

export function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

const hashId = (id: string): string => createHash('sha256').update(id).digest('hex');
const b64 = (b: Buffer): string => b.toString('base64url');

/** Where the browser may be sent back after sign-in: a path of this server, never another origin. */
export function safeReturnPath(value: unknown): string {
  if (typeof value !== 'string' || !/^\/(?![/\\])[^\s]*$/.test(value) || value.length > 512) return '/';
  return value;
}

/**
 * Dashboard sign-in: the server is the OIDC client (authorization code + PKCE against its own
 * issuer), keeps the tokens sealed in PostgreSQL and gives the browser only a random session id.
 * The API reads that cookie when a request has no bearer token (see app.ts).
 */
export class BrowserSessions {
  constructor(private readonly deps: BrowserSessionDeps) {}

  private secure(): string {
    return this.deps.origin()?.startsWith('https:') ? '; Secure' : '';
  }

  sessionCookie(id: string): string {
    return `${SESSION_COOKIE}=${id}; Path=/; Max-Age=${SESSION_TTL_SECONDS}; HttpOnly; SameSite=Strict${this.secure()}`;
  }

  clearedCookies(): string[] {
    return [
      `${SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict${this.secure()}`,
      `${LOGIN_COOKIE}=; Path=/auth/web; Max-Age=0; HttpOnly; SameSite=Lax${this.secure()}`,
    ];
  }

  private webOrThrow(): WebSignIn {
    const web = this.deps.web();
    if (!web)
      throw new AtelierError(
        'UNAVAILABLE',
        'the dashboard’s sign-in is not ready yet (the server is starting): try again in a few seconds',
      );
    return web;
  }

  private mac(payload: string): string {
    return createHmac('sha256', this.deps.key).update(`login:${payload}`).digest('base64url');
  }

  /** Starts a sign-in: where to send the browser, and the cookie that remembers state and verifier. */
  async beginLogin(returnTo: unknown): Promise<{ location: string; cookie: string }> {
    const web = this.webOrThrow();
    const endpoints = await web.endpoints();
    const state = b64(randomBytes(24));
    const verifier = b64(randomBytes(32));
    const challenge = b64(createHash('sha256').update(verifier).digest());
    const payload = b64(
      Buffer.from(JSON.stringify({ s: state, v: verifier, r: safeReturnPath(returnTo), e: Date.now() + LOGIN_TTL_SECONDS * 1000 })),
    );
    const url = new URL(endpoints.authorization_endpoint);
    url.search = new URLSearchParams({
      client_id: web.clientId,
      response_type: 'code',
      redirect_uri: web.redirectUri(),
      scope: web.scope,
      state,
      code_challenge: challenge,
      code_challenge_method: 'S256',
    }).toString();
    return {
      location: url.toString(),
      cookie: `${LOGIN_COOKIE}=${payload}.${this.mac(payload)}; Path=/auth/web; Max-Age=${LOGIN_TTL_SECONDS}; HttpOnly; SameSite=Lax${this.secure()}`,
    };
  }

  /** The issuer sent the browser back: checks state, redeems the code, opens the session. */
  async completeLogin(
    query: Record<string, string | undefined>,
    cookieHeader: string | undefined,
    ip: string | undefined,
  ): Promise<{ cookie: string; returnTo: string }> {
    const web = this.webOrThrow();
    const raw = cookieValue(cookieHeader, LOGIN_COOKIE) ?? '';
    const [payload, mac] = raw.split('.');
    const expected = payload ? this.mac(payload) : '';
    if (!payload || !mac || mac.length !== expected.length || !timingSafeEqual(Buffer.from(mac), Buffer.from(expected)))
      throw new AtelierError('UNAUTHENTICATED', 'this sign-in was not started from this browser (or it expired): sign in again from /');
    const login = JSON.parse(Buffer.from(payload, 'base64url').toString()) as { s: string; v: string; r: string; e: number };
    if (login.e < Date.now()) throw new AtelierError('UNAUTHENTICATED', 'this sign-in took more than 10 minutes: sign in again from /');
    if (query.state !== login.s)
      throw new AtelierError('UNAUTHENTICATED', 'the sign-in answer does not match this browser’s: sign in again from /');
    if (query.error)
      throw new AtelierError('UNAUTHENTICATED', `sign-in refused (${query.error_description ?? query.error}): sign in again from /`);
    if (!query.code) throw new AtelierError('INVALID_ARGUMENT', 'the sign-in answer carries no code: sign in again from /');
    const tokens = await this.tokenCall(
      web,
      {
        grant_type: 'authorization_code',
        code: query.code,
        redirect_uri: web.redirectUri(),
        client_id: web.clientId,
        code_verifier: login.v,
      },
      ip,
    );
    const principal = await this.deps.authenticator.authenticate(`Bearer ${tokens.access}`, undefined);
    const id = b64(randomBytes(32));
    await this.deps.pool.query(
      `INSERT INTO browser_sessions (id_hash, user_id, access_token_sealed, access_expires_at, refresh_token_sealed, expires_at)
       VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))`,
      // Without a refresh token (sealed as ''), the session ends with its access token.
      [
        hashId(id),
        principal.userId,
        this.seal(tokens.access, 'a'),
        tokens.expiresAt,
        this.seal(tokens.refresh ?? '', 'r'),
        SESSION_TTL_SECONDS,
      ],
    );
    return { cookie: this.sessionCookie(id), returnTo: login.r };
  }

  private seal(token: string, kind: 'a' | 'r'): string {
    return this.deps.sealer.encrypt(token, `browser-session:${kind}`);
  }

  private unseal(sealed: string, kind: 'a' | 'r'): string {
    return this.deps.sealer.decrypt(sealed, `browser-session:${kind}`).toString();
  }

  private async tokenCall(
    web: WebSignIn,
    form: Record<string, string>,
    ip: string | undefined,
  ): Promise<{ access: string; refresh: string | undefined; expiresAt: Date }> {
    const res = await web.dispatch((await web.endpoints()).token_endpoint, new URLSearchParams(form).toString(), ip);
    let body: TokenAnswer = {};
    try {
      body = JSON.parse(res.body) as TokenAnswer;
    } catch {
      // reported below
    }
    if (res.status !== 200 || !body.access_token)
      throw new AtelierError(
        'UNAUTHENTICATED',
        `the sign-in could not be completed (${body.error_description ?? body.error ?? `issuer answered ${res.status}`}): sign in again from /`,
      );
    return {
      access: body.access_token,
      // An issuer may give none (an external one without `offline_access`), or keep the one it gave (no rotation).
      refresh: body.refresh_token,
      expiresAt: new Date(Date.now() + (body.expires_in ?? 600) * 1000),
    };
  }

  private async row(id: string): Promise<SessionRow | undefined> {
    const [row] = await queryRows<SessionRow>(
      this.deps.pool,
      `SELECT id_hash, user_id, tenant_name, access_token_sealed, access_expires_at, refresh_token_sealed
         FROM browser_sessions WHERE id_hash = $1 AND expires_at > now()`,
      [hashId(id)],
    );
    return row;
  }

  /** The session's current access token, refreshed (once, under a row lock: tokens rotate) when it is about to expire. */
  private async accessToken(id: string, row: SessionRow): Promise<string> {
    if (row.access_expires_at.getTime() - Date.now() > REFRESH_MARGIN_MS) return this.unseal(row.access_token_sealed, 'a');
    if (this.unseal(row.refresh_token_sealed, 'r') === '') {
      // Nothing to refresh with (an external issuer that gives no refresh token): the access token
      // is used to its end, and the session ends with it.
      if (row.access_expires_at.getTime() > Date.now()) return this.unseal(row.access_token_sealed, 'a');
      await this.deps.pool.query('DELETE FROM browser_sessions WHERE id_hash = $1', [hashId(id)]);
      throw new AtelierError(
        'UNAUTHENTICATED',
        'your dashboard session has ended (the identity provider gives no refresh token, so a session lasts as long as its access token): sign in again',
      );
    }
    const web = this.webOrThrow();
    return withTransaction(this.deps.pool, async (c) => {
      const r = await c.query<SessionRow>('SELECT * FROM browser_sessions WHERE id_hash = $1 FOR UPDATE', [hashId(id)]);
      const locked = r.rows[0];
      if (!locked) throw new AtelierError('UNAUTHENTICATED', 'you were signed out: sign in again');
      if (locked.access_expires_at.getTime() - Date.now() > REFRESH_MARGIN_MS) return this.unseal(locked.access_token_sealed, 'a');
      const refresh = this.unseal(locked.refresh_token_sealed, 'r');
      const tokens = await this.tokenCall(web, { grant_type: 'refresh_token', refresh_token: refresh, client_id: web.clientId }, undefined);
      await c.query(
        'UPDATE browser_sessions SET access_token_sealed = $2, access_expires_at = $3, refresh_token_sealed = $4 WHERE id_hash = $1',
        [hashId(id), this.seal(tokens.access, 'a'), tokens.expiresAt, this.seal(tokens.refresh ?? refresh, 'r')],
      );
      return tokens.access;
    });
  }

  /** The principal of a request that carries the session cookie (and no bearer token). */
  async authenticate(cookieHeader: string | undefined, tenantHeader: string | undefined): Promise<Principal | undefined> {
    return (await this.session(cookieHeader, tenantHeader))?.principal;
  }

  /**
   * As `authenticate`, with the access token the session stands for: the dashboard's Console runs
   * the CLI with it, so a command can do exactly what its caller may (the token never leaves the server).
   */
  async session(
    cookieHeader: string | undefined,
    tenantHeader: string | undefined,
  ): Promise<{ principal: Principal; token: string } | undefined> {
    const id = cookieValue(cookieHeader, SESSION_COOKIE);
    if (!id) return undefined;
    const row = await this.row(id);
    if (!row) throw new AtelierError('UNAUTHENTICATED', 'your dashboard session has ended: sign in again');
    const token = await this.accessToken(id, row);
    const principal = await this.deps.authenticator.authenticate(`Bearer ${token}`, tenantHeader ?? row.tenant_name ?? undefined);
    return { principal, token };
  }

  /** The tenants the user belongs to, with their role in each (the tenant switch lists them). */
  async tenantsOf(userId: string): Promise<{ name: string; role: string }[]> {
    return queryRows<{ name: string; role: string }>(
      this.deps.pool,
      'SELECT tn.name, m.role FROM memberships m JOIN tenants tn ON tn.id = m.tenant_id WHERE m.user_id = $1 ORDER BY tn.name',
      [userId],
    );
  }

  /** Switches the session's tenant (checked: the user must be a member). */
  async switchTenant(cookieHeader: string | undefined, tenant: string): Promise<Principal> {
    const p = await this.authenticate(cookieHeader, tenant);
    if (!p) throw new AtelierError('UNAUTHENTICATED', 'not signed in to the dashboard: sign in first');
    await this.deps.pool.query('UPDATE browser_sessions SET tenant_name = $2 WHERE id_hash = $1', [
      hashId(cookieValue(cookieHeader, SESSION_COOKIE)!),
      p.tenantName,
    ]);
    return p;
  }

  /**
   * Signs out: the refresh token is revoked at the issuer (which ends its grant, so the access
   * token too) and the row goes. With no refresh token, or an external issuer without a revocation
   * endpoint, only the row goes: the tokens, which never left the server, are forgotten with it.
   */
  async logout(cookieHeader: string | undefined): Promise<void> {
    const id = cookieValue(cookieHeader, SESSION_COOKIE);
    if (!id) return;
    const row = await this.row(id);
    const web = this.deps.web();
    const refresh = row ? this.unseal(row.refresh_token_sealed, 'r') : '';
    const revocation = web && refresh !== '' ? (await web.endpoints()).revocation_endpoint : undefined;
    if (web && revocation) {
      const form = new URLSearchParams({ token: refresh, token_type_hint: 'refresh_token', client_id: web.clientId });
      const res = await web.dispatch(revocation, form.toString());
      if (res.status !== 200)
        throw new AtelierError('UNAVAILABLE', `signing out failed at the issuer (it answered ${res.status}): try again`);
    }
    await this.deps.pool.query('DELETE FROM browser_sessions WHERE id_hash = $1', [hashId(id)]);
  }

  /** Ended sessions are removed (their refresh tokens have expired with them at the issuer). */
  async prune(): Promise<void> {
    await this.deps.pool.query('DELETE FROM browser_sessions WHERE expires_at <= now()');
  }
}
