// Named imports: a default import of a built-in is wrapped in a copy of all its exports in the bundle (esbuild's __toESM).
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { mkdirSync, rmdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type * as OpenIdClient from 'openid-client';
import { AtelierError, isErrorCode, readClientConfig, type Config, type Credential } from '../core/index.js';
import { createClient, type AtelierClient } from '../sdk/index.js';
import { createSecretStore, type SecretStore } from './secrets.js';

/** Where the CLI talks to, resolved from --context, ATELIER_CONTEXT, ATELIER_URL/TOKEN or config.yaml. */
export interface Target {
  context: string;
  url: string;
  /** Sent as `x-atelier-tenant` when set (ATELIER_TENANT, else the context's tenant). */
  tenant: string | undefined;
  /** How the context logs in (for hints); 'env' when ATELIER_URL/ATELIER_TOKEN are used. */
  auth: 'token' | 'oidc' | 'env';
  credential: Credential | undefined;
  /** Where a refreshed credential is saved; absent for ATELIER_TOKEN. */
  store: SecretStore | undefined;
  configDir: string;
}

export async function resolveTarget(config: Config, contextFlag: string | undefined): Promise<Target> {
  if (config.url && !contextFlag) {
    return {
      context: '(ATELIER_URL)',
      url: config.url,
      tenant: config.tenant,
      auth: 'env',
      credential: config.token ? { kind: 'api-token', token: config.token } : undefined,
      store: undefined,
      configDir: config.configDir,
    };
  }
  const cc = await readClientConfig(config.configDir);
  const name = contextFlag ?? config.context ?? cc.currentContext;
  if (!name) {
    throw new AtelierError(
      'UNAUTHENTICATED',
      `no Atelier context is configured in ${config.configDir}: start a server on this machine with \`atelier server start\`, add one with \`atelier context add NAME --url URL\`, or set ATELIER_URL and ATELIER_TOKEN`,
    );
  }
  const ctx = cc.contexts.find((c) => c.name === name);
  if (!ctx)
    throw new AtelierError(
      'NOT_FOUND',
      `context "${name}" does not exist: known contexts are ${cc.contexts.map((c) => c.name).join(', ') || '(none)'}`,
    );
  const store = createSecretStore(config.configDir);
  return {
    context: name,
    url: ctx.url,
    tenant: config.tenant ?? ctx.tenant,
    auth: config.token ? 'env' : ctx.auth,
    credential: config.token ? { kind: 'api-token', token: config.token } : store.get(name),
    store: config.token ? undefined : store,
    configDir: config.configDir,
  };
}

export interface RequestOptions {
  method: string;
  path: string;
  body?: unknown;
  raw?: Buffer;
  accept?: string;
  /** Send no credential (public routes such as /v1/auth/config). */
  anonymous?: boolean;
}

/** The token for `Authorization: Bearer`: the API token, or the OIDC token the server can verify. */
export function bearerOf(credential: Credential | undefined): string | undefined {
  if (!credential) return undefined;
  if (credential.kind === 'api-token') return credential.token;
  return credential.bearer === 'id' && credential.idToken ? credential.idToken : credential.accessToken;
}

async function send(target: Target, opts: RequestOptions, payload: Buffer | undefined): Promise<IncomingMessage> {
  const url = new URL(opts.path, target.url);
  // TLS (node:https, node:tls, node:crypto) only loads for a server that speaks it.
  const requestOf = url.protocol === 'https:' ? (await import('node:https')).request : httpRequest;
  // The channel is kept in the approvals audit (cli, slack, dashboard, api).
  const headers: Record<string, string> = { accept: opts.accept ?? 'application/json', 'x-atelier-channel': 'cli' };
  const bearer = opts.anonymous ? undefined : bearerOf(target.credential);
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (target.tenant) headers['x-atelier-tenant'] = target.tenant;
  if (payload) {
    headers['content-type'] = opts.raw ? 'application/octet-stream' : 'application/json';
    headers['content-length'] = String(payload.length);
  }
  return new Promise((resolve, reject) => {
    const req = requestOf(url, { method: opts.method, headers }, resolve);
    req.on('error', (err: NodeJS.ErrnoException) => reject(unreachable(target, err)));
    req.end(payload);
  });
}

function unreachable(target: Target, err: NodeJS.ErrnoException): AtelierError {
  if (err.code === 'ECONNREFUSED' || err.code === 'ENOTFOUND' || err.code === 'EHOSTUNREACH') {
    return new AtelierError(
      'UNAVAILABLE',
      `cannot reach the Atelier server at ${target.url} (context ${target.context}): is it running? Start it with \`atelier server start\``,
    );
  }
  return new AtelierError('UNAVAILABLE', `request to ${target.url} failed: ${err.message}`);
}

/**
 * One HTTP request to the server; returns the response for streaming callers. An OIDC token
 * that expires within a minute is refreshed first, and once more on a 401 TOKEN_EXPIRED.
 */
export async function request(target: Target, opts: RequestOptions): Promise<IncomingMessage> {
  const payload = opts.raw ?? (opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body)));
  if (!opts.anonymous && refreshable(target.credential) && expiresWithin(target.credential, 60)) await refresh(target, false);
  const res = await send(target, opts, payload);
  if (res.statusCode !== 401 || opts.anonymous) return res;
  const text = (await readBody(res)).toString('utf8');
  if (errorCodeOf(text) === 'TOKEN_EXPIRED' && refreshable(target.credential)) {
    await refresh(target, true);
    const again = await send(target, opts, payload);
    if (again.statusCode !== 401) return again;
    throw errorFrom(target, 401, (await readBody(again)).toString('utf8'));
  }
  throw errorFrom(target, 401, text);
}

/** The bearer for a WebSocket (no retry on 401 there): an OIDC token near its expiry is refreshed first. */
export async function freshBearer(target: Target): Promise<string | undefined> {
  if (refreshable(target.credential) && expiresWithin(target.credential, 60)) await refresh(target, false);
  return bearerOf(target.credential);
}

/** The error a server answer carries (status and JSON body), with the context's login hint on a 401. */
export function serverError(target: Target, status: number, text: string): AtelierError {
  return errorFrom(target, status, text);
}

export async function readBody(res: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of chunksOf(res)) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/**
 * A response's chunks as they arrive, as `for await (const c of res)` gives them (Node's
 * createAsyncIterator, which this follows: `read()` on 'readable', the stream's error, "Premature
 * close" when it closes before its end, the stream destroyed when the loop stops). Not Node's own:
 * its functions are compiled at their first call in every command (~1 ms of CPU), ours come from
 * the bundle's code cache.
 */
async function* chunksOf(res: IncomingMessage): AsyncGenerator<Buffer | string> {
  const premature = (): Error => Object.assign(new Error('Premature close'), { code: 'ERR_STREAM_PREMATURE_CLOSE' });
  let wake: (() => void) | undefined;
  // A stream that already ended, failed or closed says so at once, as Node's does.
  let ended = res.readableEnded;
  let failed: Error | undefined = res.errored ?? (res.destroyed && !ended ? premature() : undefined);
  const next = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  res.on('readable', next);
  res.once('end', () => {
    ended = true;
    next();
  });
  res.once('error', (err) => {
    failed ??= err;
    next();
  });
  res.once('close', () => {
    if (!ended) failed ??= premature();
    next();
  });
  try {
    for (;;) {
      const chunk = res.destroyed ? null : (res.read() as Buffer | string | null);
      if (chunk !== null) yield chunk;
      else if (failed) throw failed;
      else if (ended) return;
      else await new Promise<void>((resolve) => (wake = resolve));
    }
  } finally {
    res.destroy();
  }
}

function errorCodeOf(text: string): unknown {
  try {
    return (JSON.parse(text) as { code?: unknown }).code;
  } catch {
    return undefined;
  }
}

function loginHint(target: Target): string {
  const flag = ` --context ${target.context}`;
  if (target.auth === 'env') return 'check ATELIER_TOKEN';
  if (!target.credential) return `this context has no credential: log in with \`atelier auth login${flag}\``;
  return `log in again with \`atelier auth login${flag}\``;
}

function errorFrom(target: Target, status: number, text: string): AtelierError {
  let body: { code?: unknown; message?: unknown; details?: Record<string, unknown>; requestId?: string } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // not JSON: keep the status
  }
  const code = isErrorCode(body.code) ? body.code : status === 401 ? 'UNAUTHENTICATED' : status === 503 ? 'UNAVAILABLE' : 'INTERNAL';
  let message = typeof body.message === 'string' ? body.message : `server answered ${status}`;
  // The server's message may already say what to do; the context is what it cannot know.
  if (status === 401) {
    const which = target.auth === 'env' ? 'the token in ATELIER_TOKEN' : `context ${target.context}`;
    message = message.includes('`atelier ') ? `${message} (${which})` : `${message} (${which}): ${loginHint(target)}`;
  }
  return new AtelierError(code, message, { ...body.details, ...(body.requestId ? { requestId: body.requestId } : {}) });
}

/** Turns a non-2xx response into the server's AtelierError (code, message, details). */
export async function raiseFor(res: IncomingMessage, target?: Target): Promise<void> {
  const status = res.statusCode ?? 500;
  if (status < 400) return;
  const text = (await readBody(res)).toString('utf8');
  if (target) throw errorFrom(target, status, text);
  throw errorFrom(
    { context: '?', url: '', tenant: undefined, auth: 'env', credential: undefined, store: undefined, configDir: '' },
    status,
    text,
  );
}

/** The lines of an NDJSON response, as they arrive (the last one may lack its newline). */
export async function* ndjsonLines(res: IncomingMessage): AsyncGenerator<string> {
  let pending = '';
  res.setEncoding('utf8');
  for await (const chunk of chunksOf(res)) {
    pending += chunk as string;
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      yield pending.slice(0, nl);
      pending = pending.slice(nl + 1);
    }
  }
  if (pending) yield pending;
}

/** JSON request → parsed JSON response. */
export async function call<T>(target: Target, opts: RequestOptions): Promise<T> {
  const res = await request(target, opts);
  await raiseFor(res, target);
  const text = (await readBody(res)).toString('utf8');
  return (text ? JSON.parse(text) : undefined) as T;
}

/**
 * The SDK over this CLI's transport (the context's credential, refreshed OIDC tokens, login
 * hints on a 401): every command names its route from the route table, never a path.
 */
export function sdkFor(target: Target): AtelierClient {
  return createClient({
    json: (req) => call<unknown>(target, req),
    async bytes(req) {
      const res = await request(target, req);
      await raiseFor(res, target);
      return readBody(res);
    },
  });
}

// ---- OIDC tokens: shared by `auth login`, `auth logout` and the silent refresh ----

type OidcCredential = Extract<Credential, { kind: 'oidc' }>;

function refreshable(c: Credential | undefined): c is OidcCredential & { refreshToken: string } {
  return c?.kind === 'oidc' && typeof c.refreshToken === 'string' && c.refreshToken !== '';
}

function expiresWithin(c: OidcCredential, seconds: number): boolean {
  return c.expiresAt !== null && Date.parse(c.expiresAt) - Date.now() < seconds * 1000;
}

/** Loads openid-client (jose and oauth4webapi come with it) only when a token endpoint is needed. */
export async function openIdClient(): Promise<typeof OpenIdClient> {
  return import('openid-client');
}

/** An openid-client Configuration for the server's relay endpoints (the CLI is a public client). */
export function oidcConfiguration(
  oc: typeof OpenIdClient,
  endpoints: {
    issuer: string;
    clientId: string;
    deviceAuthorizationEndpoint?: string;
    tokenEndpoint: string;
    revocationEndpoint?: string;
    idTokenAlg?: string;
  },
): OpenIdClient.Configuration {
  const cfg = new oc.Configuration(
    {
      issuer: endpoints.issuer,
      token_endpoint: endpoints.tokenEndpoint,
      ...(endpoints.deviceAuthorizationEndpoint ? { device_authorization_endpoint: endpoints.deviceAuthorizationEndpoint } : {}),
      ...(endpoints.revocationEndpoint ? { revocation_endpoint: endpoints.revocationEndpoint } : {}),
    },
    endpoints.clientId,
    endpoints.idTokenAlg ? { id_token_signed_response_alg: endpoints.idTokenAlg } : undefined,
    oc.None(),
  );
  // The relay is the Atelier server itself; plain http is what a local server speaks.
  if ([endpoints.tokenEndpoint, endpoints.deviceAuthorizationEndpoint, endpoints.revocationEndpoint].some((u) => u?.startsWith('http:')))
    oc.allowInsecureRequests(cfg);
  return cfg;
}

function isJwt(token: string): boolean {
  return /^[\w-]+\.[\w-]+\.[\w-]*$/.test(token);
}

function jwtExp(token: string): number | undefined {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { exp?: unknown };
    return typeof payload.exp === 'number' ? payload.exp : undefined;
  } catch {
    return undefined;
  }
}

/** The credential to store from a token response (a refresh keeps what the issuer did not resend). */
export function credentialFromTokens(
  tokens: OpenIdClient.TokenEndpointResponse & OpenIdClient.TokenEndpointResponseHelpers,
  base: Pick<OidcCredential, 'issuer' | 'clientId' | 'tokenEndpoint' | 'revocationEndpoint' | 'idTokenAlg'> & Partial<OidcCredential>,
): OidcCredential {
  const idToken = tokens.id_token ?? base.idToken;
  // An opaque access token (Google's) cannot be verified by the server: the id_token goes instead.
  const bearer = !isJwt(tokens.access_token) && idToken ? 'id' : 'access';
  const expiresIn = tokens.expiresIn();
  const exp =
    bearer === 'id' ? jwtExp(idToken!) : expiresIn !== undefined ? Math.floor(Date.now() / 1000) + expiresIn : jwtExp(tokens.access_token);
  const refreshToken = tokens.refresh_token ?? base.refreshToken;
  return {
    kind: 'oidc',
    accessToken: tokens.access_token,
    ...(refreshToken ? { refreshToken } : {}),
    ...(idToken ? { idToken } : {}),
    bearer,
    expiresAt: exp === undefined ? null : new Date(exp * 1000).toISOString(),
    issuer: base.issuer,
    clientId: base.clientId,
    tokenEndpoint: base.tokenEndpoint,
    ...(base.revocationEndpoint ? { revocationEndpoint: base.revocationEndpoint } : {}),
    ...(base.idTokenAlg ? { idTokenAlg: base.idTokenAlg } : {}),
  };
}

/** Turns an openid-client failure into our error, naming the server; never echoes a token. */
export async function oidcError(err: unknown, target: Target, what: string): Promise<AtelierError> {
  const e = err as { error?: string; error_description?: string; code?: string; message?: string; cause?: unknown };
  if (e.code === 'OAUTH_RESPONSE_BODY_ERROR' && typeof e.error === 'string') {
    const detail = e.error_description ? `${e.error}: ${e.error_description}` : e.error;
    if (e.error === 'invalid_grant')
      return new AtelierError('UNAUTHENTICATED', `${what} was refused by the issuer (${detail}): ${loginHint(target)}`, { error: e.error });
    return new AtelierError('UNAUTHENTICATED', `${what} failed (${detail})`, { error: e.error });
  }
  if (err instanceof TypeError || e.code === 'OAUTH_TIMEOUT') {
    const cause = (e.cause as NodeJS.ErrnoException | undefined)?.code;
    return new AtelierError('UNAVAILABLE', `${what} failed: cannot reach the Atelier server at ${target.url}${cause ? ` (${cause})` : ''}`);
  }
  if (e.code === 'OAUTH_RESPONSE_IS_NOT_CONFORM' || e.code === 'OAUTH_RESPONSE_IS_NOT_JSON') {
    const res = e.cause as Response | undefined;
    // The server's own error (an unreachable issuer, named) is more useful than the status alone.
    let body: { code?: unknown; message?: unknown } = {};
    try {
      body = (await res?.clone().json()) as typeof body;
    } catch {
      // not our JSON error
    }
    if (typeof body.message === 'string')
      return new AtelierError(isErrorCode(body.code) ? body.code : 'UNAVAILABLE', `${what} failed: ${body.message}`);
    return new AtelierError('UNAVAILABLE', `${what} failed: the server at ${target.url} answered ${res?.status ?? 'unexpectedly'}`);
  }
  return new AtelierError('UNAUTHENTICATED', `${what} failed: ${e.message ?? String(err)}`);
}

/**
 * Refreshes the context's OIDC tokens and saves them. A lock directory beside the config keeps
 * two CLI processes from spending the same (rotating) refresh token; the loser uses the
 * winner's tokens.
 */
async function refresh(target: Target, force: boolean): Promise<void> {
  const before = target.credential;
  if (!refreshable(before)) return;
  const unlock = await lock(join(target.configDir, `.refresh-${encodeURIComponent(target.context)}.lock`));
  try {
    const latest = target.store?.get(target.context);
    if (latest?.kind === 'oidc' && latest.accessToken !== before.accessToken && !expiresWithin(latest, 60)) {
      target.credential = latest;
      return;
    }
    const current = refreshable(latest) ? latest : before;
    if (!force && !expiresWithin(current, 60)) return;
    const oc = await openIdClient();
    const cfg = oidcConfiguration(oc, current);
    let tokens;
    try {
      tokens = await oc.refreshTokenGrant(cfg, current.refreshToken);
    } catch (err) {
      throw await oidcError(err, target, `refreshing the session of context ${target.context}`);
    }
    const next = credentialFromTokens(tokens, current);
    target.store?.set(target.context, next);
    target.credential = next;
  } finally {
    unlock();
  }
}

async function lock(path: string): Promise<() => void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      mkdirSync(path, { mode: 0o700 });
      return () => rmdirSync(path);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return () => undefined; // no config dir: nothing to share
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      // A lock left by a killed process is taken over after 30 s.
      try {
        if (Date.now() - statSync(path).mtimeMs > 30_000) rmdirSync(path);
      } catch {
        // gone meanwhile
      }
      if (Date.now() > deadline) throw new AtelierError('UNAVAILABLE', `another atelier process holds ${path}: remove it if none runs`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
