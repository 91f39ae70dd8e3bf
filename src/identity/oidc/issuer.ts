import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { JWK } from 'jose';
import type * as OidcProvider from 'oidc-provider';
import type { Account, Configuration, JWKS, KoaContextWithOIDC, default as ProviderType } from 'oidc-provider';
import { AtelierError } from '../../core/index.js';
import type { Pool } from '../../db/index.js';
import type { MasterKey } from '../masterKey.js';
import { hashPassword, passwordProblem, verifyPassword } from '../passwords.js';
import { postgresAdapterFactory, pruneExpiredPayloads } from './adapter.js';
import { ensureSigningKey, loadSigningKeys, rotateSigningKey, SIGNING_ALG } from './keys.js';
import { FailureLimiter } from './limiter.js';
import {
  changePasswordPage,
  confirmCodePage,
  consentPage,
  infoPage,
  layout,
  loginPage,
  PAGE_HEADERS,
  userCodePage,
  type Page,
} from './pages.js';

/** Where the provider is mounted on the server; the issuer is `${publicUrl}/oidc`. */
export const OIDC_PREFIX = '/oidc';
/** The one client: the Atelier CLI, public (no secret), device flow and refresh tokens only. */
export const CLI_CLIENT_ID = 'atelier-cli';
const CLI_CLIENT_NAME = 'Atelier CLI';
/** The dashboard: public too, authorization code + PKCE (the server redeems the code for the browser). */
export const WEB_CLIENT_ID = 'atelier-dashboard';
const WEB_CLIENT_NAME = 'Atelier dashboard';
/** Where the issuer sends the dashboard's browser back with its code, on the server's public origin. */
export const WEB_CALLBACK_PATH = '/auth/web/callback';
/** The resource indicator of the Atelier API; access tokens for it carry `aud` = the audience. */
const API_RESOURCE = 'urn:atelier:api';
const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

const DAY = 24 * 3600;
const KEY_RETENTION_MARGIN_SECONDS = 300;
const PASSWORD_CHANGE_TTL_SECONDS = 600;

export interface EmbeddedIssuerOptions {
  pool: Pool;
  masterKey: MasterKey;
  logger: FastifyBaseLogger;
  /** The `aud` of access tokens (default 'atelier'). */
  audience?: string;
  /** Access (and ID) token lifetime (default 600 s). */
  accessTokenTtlSeconds?: number;
  /** Refresh token lifetime, renewed at each refresh (default 30 days). */
  refreshTokenTtlSeconds?: number;
  /** Whether this node runs the installation's periodic jobs (src/db/leader.ts); always, without it. */
  isLeader?: () => boolean;
}

export interface IssuerEndpoints {
  authorization_endpoint: string;
  device_authorization_endpoint: string;
  token_endpoint: string;
  revocation_endpoint: string;
  jwks_uri: string;
}

/** What the relay gets back from the issuer, passed through to the CLI as is. */
export interface RelayedResponse {
  status: number;
  contentType: string | undefined;
  body: string;
}

interface LocalUser {
  id: string;
  name: string;
  email: string | null;
  password_hash: string | null;
  must_change_password: boolean;
  disabled_at: Date | null;
}

type FormBody = Record<string, string | undefined>;
type UidRoute = { Params: { uid: string }; Body: FormBody };

/** oidc-provider warns at import time that Node 20 is not its preferred runtime; it runs fine on it (measured). */
async function importProvider(): Promise<typeof OidcProvider> {
  const warn = console.warn;
  console.warn = (...args: unknown[]) => {
    if (typeof args[0] === 'string' && args[0].includes('Unsupported runtime')) return;
    warn(...args);
  };
  try {
    return await import('oidc-provider');
  } finally {
    console.warn = warn;
  }
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * The server's own OIDC issuer (oidc-provider), mounted under /oidc: device flow for the CLI,
 * refresh tokens, revocation, JWT access tokens for the Atelier API signed with keys kept
 * encrypted in PostgreSQL, and the server's own sign-in, first-login password change, consent
 * and device-code pages. All of its state is in PostgreSQL: a restart logs nobody out.
 */
export class EmbeddedIssuer {
  readonly kind = 'embedded' as const;
  readonly clientId = CLI_CLIENT_ID;
  readonly audience: string;
  issuer = '';

  private readonly pool: Pool;
  private readonly mk: MasterKey;
  private readonly log: FastifyBaseLogger;
  private readonly accessTokenTtl: number;
  private readonly refreshTokenTtl: number;
  private readonly isLeader: (() => boolean) | undefined;
  private readonly csrfKey: string;
  private readonly changeKey: string;
  /** Failed sign-ins per user name, and per address (wider: several people may share one). */
  private readonly byName = new FailureLimiter(5, 15 * 60_000);
  private readonly byAddress = new FailureLimiter(20, 15 * 60_000);
  /** Wrong user codes per address: a code has ~34 bits, guessing must stay out of reach. */
  private readonly codesByAddress = new FailureLimiter(10, 15 * 60_000);
  /** Device-page requests whose user code was not found: their attempt is not forgiven. */
  private readonly wrongCodes = new WeakSet<object>();

  private mod: typeof OidcProvider | undefined;
  private provider: ProviderType | undefined;
  private handle: ((req: IncomingMessage, res: ServerResponse) => Promise<void>) | undefined;
  private origin = '';
  private app: FastifyInstance | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;

  constructor(opts: EmbeddedIssuerOptions) {
    this.pool = opts.pool;
    this.mk = opts.masterKey;
    this.log = opts.logger;
    this.audience = opts.audience ?? 'atelier';
    this.accessTokenTtl = opts.accessTokenTtlSeconds ?? 600;
    this.refreshTokenTtl = opts.refreshTokenTtlSeconds ?? 30 * DAY;
    this.isLeader = opts.isLeader;
    this.csrfKey = this.mk.derive('oidc-interaction-csrf');
    this.changeKey = this.mk.derive('oidc-password-change');
  }

  /** The server's public URL (what browsers and CLIs use), known after `start`. */
  publicUrl(): string {
    return this.origin;
  }

  private get keyRetentionSeconds(): number {
    return this.accessTokenTtl + KEY_RETENTION_MARGIN_SECONDS;
  }

  // ---------------------------------------------------------------- lifecycle

  /** Called once the server listens: the issuer is `${publicUrl}/oidc`. */
  async start(publicUrl: string): Promise<void> {
    this.origin = publicUrl.replace(/\/+$/, '');
    this.issuer = `${this.origin}${OIDC_PREFIX}`;
    this.mod = await importProvider();
    await ensureSigningKey(this.pool, this.mk);
    await this.build();
    const prune = (): void => {
      if (this.isLeader?.() === false) return;
      pruneExpiredPayloads(this.pool).catch((err: Error) => this.log.warn({ err: err.message }, 'pruning expired OIDC state failed'));
    };
    prune();
    this.pruneTimer = setInterval(prune, 10 * 60_000);
    this.pruneTimer.unref();
  }

  async close(): Promise<void> {
    if (this.pruneTimer) clearInterval(this.pruneTimer);
    this.pruneTimer = undefined;
    this.provider = undefined;
    this.handle = undefined;
  }

  /** The published signing keys (current and recently retired), read from the database. */
  async publicJwks(): Promise<{ keys: JWK[] }> {
    return { keys: (await loadSigningKeys(this.pool, this.mk, this.keyRetentionSeconds)).published };
  }

  /**
   * A new signing key signs from now on; the previous one stays published until the tokens it
   * signed have expired. Sessions, grants and refresh tokens are untouched: nobody is logged out.
   */
  async rotateKeys(): Promise<{ kid: string }> {
    const out = await rotateSigningKey(this.pool, this.mk, this.keyRetentionSeconds);
    if (this.mod) await this.build();
    this.log.info({ kid: out.kid }, 'OIDC signing key rotated');
    return out;
  }

  endpoints(): IssuerEndpoints {
    return {
      authorization_endpoint: `${this.issuer}/auth`,
      device_authorization_endpoint: `${this.issuer}/device/auth`,
      token_endpoint: `${this.issuer}/token`,
      revocation_endpoint: `${this.issuer}/token/revocation`,
      jwks_uri: `${this.issuer}/jwks`,
    };
  }

  /**
   * Answers a relayed request (POST of a form to one of `endpoints()`) in-process, without a
   * round trip through the network to the server's own public URL. `remoteAddress` is the CLI's.
   */
  async dispatch(url: string, form: string, remoteAddress?: string): Promise<RelayedResponse> {
    if (!this.app) throw new AtelierError('UNAVAILABLE', 'the sign-in service is not mounted on this server');
    const path = new URL(url).pathname;
    if (!path.startsWith(`${OIDC_PREFIX}/`)) throw new AtelierError('INVALID_ARGUMENT', `${url} is not an endpoint of this issuer`);
    const res = await this.app.inject({
      method: 'POST',
      url: path,
      payload: form,
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      ...(remoteAddress ? { remoteAddress } : {}),
    });
    const type = res.headers['content-type'];
    return { status: res.statusCode, contentType: typeof type === 'string' ? type : undefined, body: res.body };
  }

  private async build(): Promise<void> {
    const { default: Provider } = this.mod!;
    const keys = await loadSigningKeys(this.pool, this.mk, this.keyRetentionSeconds);
    const provider = new Provider(this.issuer, this.configuration(keys.signing));
    // Requests reach the provider with the public origin and the caller's address set by
    // registerRoutes, never from client-supplied forwarding headers.
    provider.proxy = true;
    provider.on('server_error', (_ctx: unknown, err: Error) => this.log.error({ err }, 'OIDC provider error'));
    // Unhandled errors go to the server log (Koa would print them on stderr).
    (provider as unknown as NodeJS.EventEmitter).on('error', (err: Error) => this.log.error({ err }, 'OIDC provider error'));
    provider.use(async (ctx, next) => {
      // A posted user code counts as wrong until the provider has looked it up (userCodeInput
      // flags it if it was): parallel guesses cannot all pass the check before any is counted.
      let attempt: { forgive: () => void } | undefined;
      if (ctx.method === 'POST' && ctx.path === '/device') {
        const { wait, forgive } = this.codesByAddress.take(ctx.ip);
        if (wait > 0) {
          this.render(ctx, 429, infoPage('Too many attempts', `Too many wrong codes from your address: try again in ${wait} s.`, 'error'));
          return;
        }
        attempt = { forgive };
      }
      try {
        await next();
      } catch (err) {
        // A device page posted without the browser's session (cookie expired, or cookies off):
        // oidc-provider fails saving a session it never created. Start the page again instead.
        if (!(err instanceof TypeError) || !/persist can only be called/.test(err.message)) throw err;
        this.render(
          ctx,
          400,
          infoPage('Page expired', 'This page has expired: open it again and type the code your terminal shows.', 'error', {
            href: `${OIDC_PREFIX}/device`,
            text: 'Type the code again',
          }),
        );
      } finally {
        if (attempt && !this.wrongCodes.has(ctx)) attempt.forgive();
      }
    });
    this.provider = provider;
    this.handle = provider.callback() as unknown as (req: IncomingMessage, res: ServerResponse) => Promise<void>;
  }

  private configuration(signing: JWK[]): Configuration {
    const ttl = this.accessTokenTtl;
    return {
      adapter: postgresAdapterFactory(this.pool),
      clients: [
        {
          client_id: CLI_CLIENT_ID,
          client_name: CLI_CLIENT_NAME,
          token_endpoint_auth_method: 'none',
          grant_types: [DEVICE_CODE_GRANT, 'refresh_token'],
          response_types: [],
          redirect_uris: [],
        },
        {
          client_id: WEB_CLIENT_ID,
          client_name: WEB_CLIENT_NAME,
          token_endpoint_auth_method: 'none',
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          redirect_uris: [`${this.origin}${WEB_CALLBACK_PATH}`],
        },
      ],
      jwks: { keys: signing as JWKS['keys'] },
      cookies: {
        keys: [this.mk.derive('oidc-cookies')],
        long: { httpOnly: true, sameSite: 'lax' },
        short: { httpOnly: true, sameSite: 'lax' },
      },
      scopes: ['openid', 'profile', 'email', 'offline_access'],
      claims: { openid: ['sub'], profile: ['name', 'preferred_username'], email: ['email'] },
      conformIdTokenClaims: false,
      enabledJWA: { idTokenSigningAlgValues: [SIGNING_ALG] },
      clientDefaults: { id_token_signed_response_alg: SIGNING_ALG },
      features: {
        devInteractions: { enabled: false },
        userinfo: { enabled: false },
        introspection: { enabled: false },
        rpInitiatedLogout: { enabled: false },
        revocation: {
          enabled: true,
          // A client may revoke only its own tokens (the CLI's `auth logout`).
          allowedPolicy: (_ctx, client, token) => token.clientId === client.clientId,
        },
        deviceFlow: {
          enabled: true,
          charset: 'base-20',
          mask: '****-****',
          userCodeInputSource: (ctx, _form, out, err) => this.userCodeInput(ctx, out, err),
          userCodeConfirmSource: (ctx, _form, client, deviceInfo, userCode) =>
            this.userCodeConfirm(ctx, client.clientName, deviceInfo, userCode),
          successSource: (ctx) => this.deviceSuccess(ctx),
        },
        resourceIndicators: {
          enabled: true,
          // The CLI sends no `resource`: every token is for the Atelier API.
          defaultResource: (_ctx, _client, oneOf) => (oneOf && oneOf.length > 0 ? oneOf : API_RESOURCE),
          useGrantedResource: () => true,
          getResourceServerInfo: (_ctx, resource) => {
            if (resource !== API_RESOURCE) throw new this.mod!.errors.InvalidTarget(`unknown resource ${resource}: omit it`);
            return {
              scope: 'api',
              audience: this.audience,
              accessTokenTTL: ttl,
              accessTokenFormat: 'jwt',
              jwt: { sign: { alg: SIGNING_ALG } },
            };
          },
        },
      },
      findAccount: (_ctx, sub) => this.findAccount(sub),
      // The grant id rides in the access token, so the API refuses it at once after a logout
      // (revocation destroys the grant) instead of when it expires.
      extraTokenClaims: (_ctx, token) => ({ gid: (token as { grantId?: string }).grantId }),
      // Refresh tokens always for the CLI (it asks for offline_access, but need not) and for the
      // dashboard's server-side session, rotated at each use.
      issueRefreshToken: (_ctx, client) =>
        (client.clientId === CLI_CLIENT_ID || client.clientId === WEB_CLIENT_ID) && client.grantTypeAllowed('refresh_token'),
      rotateRefreshToken: true,
      loadExistingGrant: async (ctx) => {
        const grantId = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session?.grantIdFor(ctx.oidc.client!.clientId);
        return grantId ? ctx.oidc.provider.Grant.find(grantId) : undefined;
      },
      interactions: { url: (_ctx, interaction) => `${OIDC_PREFIX}/interaction/${interaction.uid}` },
      renderError: (ctx, out) => {
        const text = out.error_description ?? out.error;
        this.render(
          ctx,
          ctx.status >= 400 ? ctx.status : 400,
          infoPage(
            'Sign-in problem',
            `${text}. Start again: \`atelier auth login\` in a terminal, or sign in to the dashboard again.`,
            'error',
          ),
        );
      },
      clientBasedCORS: () => false,
      clockTolerance: 5,
      ttl: {
        AccessToken: ttl,
        IdToken: ttl,
        RefreshToken: this.refreshTokenTtl,
        DeviceCode: 600,
        Interaction: 3600,
        Session: DAY,
        Grant: 365 * DAY,
        AuthorizationCode: 60,
        ClientCredentials: ttl,
        BackchannelAuthenticationRequest: 600,
      },
    };
  }

  private async findAccount(sub: string): Promise<Account | undefined> {
    const r = await this.pool.query<{ id: string; name: string; email: string | null }>(
      "SELECT id, name, email FROM users WHERE id = $1 AND issuer = 'local' AND disabled_at IS NULL",
      [sub],
    );
    const user = r.rows[0];
    if (!user) return undefined;
    return {
      accountId: user.id,
      name: user.name,
      claims: () => ({ sub: user.id, name: user.name, preferred_username: user.name, ...(user.email ? { email: user.email } : {}) }),
    };
  }

  // ---------------------------------------------------------------- HTTP

  /** Mounts the provider under /oidc and the sign-in pages; every route is public. */
  registerRoutes(app: FastifyInstance): void {
    this.app = app;
    const origin = (): URL => new URL(this.origin);

    void app.register(async (scope) => {
      // The provider reads the request body itself: nothing here may consume it.
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', (_request, _payload, done) => done(null, undefined));
      const toProvider = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
        const handle = this.handle;
        if (!handle) throw new AtelierError('UNAVAILABLE', 'the sign-in service is starting: try again in a few seconds');
        const raw = request.raw as IncomingMessage & { originalUrl?: string };
        const url = raw.url ?? '/';
        // The provider sees its own paths (mounted at /oidc) and the public origin, whatever Host
        // or forwarding headers the client sent; the caller's address is the one Fastify trusts.
        raw.originalUrl = url;
        raw.url = url.slice(OIDC_PREFIX.length) || '/';
        const pub = origin();
        raw.headers.host = pub.host;
        raw.headers['x-forwarded-proto'] = pub.protocol.replace(':', '');
        raw.headers['x-forwarded-for'] = request.ip;
        delete raw.headers['x-forwarded-host'];
        reply.hijack();
        await handle(raw, reply.raw);
      };
      scope.route({
        method: ['GET', 'POST', 'OPTIONS', 'HEAD'],
        url: `${OIDC_PREFIX}/*`,
        config: { access: 'public' },
        handler: toProvider,
      });
    });

    void app.register(async (scope) => {
      scope.addContentTypeParser(
        'application/x-www-form-urlencoded',
        { parseAs: 'string', bodyLimit: 16 << 10 },
        (_request, body, done) => {
          done(null, Object.fromEntries(new URLSearchParams(body as string)));
        },
      );
      const config = { access: 'public' as const };
      const base = `${OIDC_PREFIX}/interaction/:uid`;
      scope.get<UidRoute>(base, { config }, (request, reply) => this.showInteraction(request, reply));
      scope.post<UidRoute>(`${base}/login`, { config }, (request, reply) => this.submitLogin(request, reply));
      scope.post<UidRoute>(`${base}/password`, { config }, (request, reply) => this.submitPasswordChange(request, reply));
      scope.post<UidRoute>(`${base}/consent`, { config }, (request, reply) => this.submitConsent(request, reply));
      scope.post<UidRoute>(`${base}/abort`, { config }, (request, reply) => this.submitAbort(request, reply));
    });
  }

  // ---------------------------------------------------------------- pages

  private render(
    ctx: KoaContextWithOIDC | { status: number; set(h: Record<string, string>): void; body: unknown },
    status: number,
    page: Page,
  ): void {
    ctx.status = status;
    ctx.set({ ...PAGE_HEADERS });
    ctx.body = layout(page);
  }

  private send(reply: FastifyReply, status: number, page: Page): FastifyReply {
    return reply
      .status(status)
      .headers({ ...PAGE_HEADERS })
      .send(layout(page));
  }

  private csrf(uid: string): string {
    return createHmac('sha256', this.csrfKey).update(`interaction:${uid}`).digest('base64url');
  }

  private interactionUrl(uid: string, action?: string): string {
    return `${OIDC_PREFIX}/interaction/${encodeURIComponent(uid)}${action ? `/${action}` : ''}`;
  }

  /**
   * The interaction named in the URL, if this browser holds its cookie; otherwise a page that
   * says to start again (expired, another browser, or a forged link). POSTs also need the CSRF token.
   */
  private async interaction(
    request: FastifyRequest<UidRoute>,
    reply: FastifyReply,
    post: boolean,
  ): Promise<Awaited<ReturnType<ProviderType['interactionDetails']>> | undefined> {
    const provider = this.provider;
    if (!provider) throw new AtelierError('UNAVAILABLE', 'the sign-in service is starting: try again in a few seconds');
    const { uid } = request.params;
    if (post && !sameSecret(String(request.body?.csrf ?? ''), this.csrf(uid))) {
      this.send(
        reply,
        403,
        infoPage('Form expired', 'This form is not valid any more: go back to your terminal and run `atelier auth login` again.', 'error'),
      );
      return undefined;
    }
    let details;
    try {
      details = await provider.interactionDetails(request.raw, reply.raw);
    } catch (err) {
      if ((err as Error).name !== 'SessionNotFound') throw err;
    }
    if (!details || details.uid !== uid) {
      this.send(
        reply,
        400,
        infoPage(
          'Sign-in expired',
          'This sign-in has expired or was started in another browser: run `atelier auth login` again and open the link it prints.',
          'error',
        ),
      );
      return undefined;
    }
    return details;
  }

  private async clientName(clientId: unknown): Promise<string> {
    const client = typeof clientId === 'string' ? await this.provider!.Client.find(clientId) : undefined;
    return client?.clientName ?? client?.clientId ?? 'An application';
  }

  private async showInteraction(request: FastifyRequest<UidRoute>, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const details = await this.interaction(request, reply, false);
    if (!details) return undefined;
    const uid = details.uid;
    const clientName = await this.clientName(details.params.client_id);
    switch (details.prompt.name) {
      case 'login':
        return this.send(reply, 200, this.loginForm(uid, clientName));
      case 'consent':
        return this.send(reply, 200, await this.consentForm(details));
      default:
        return this.send(
          reply,
          400,
          infoPage('Sign-in problem', `this sign-in needs "${details.prompt.name}", which this server does not offer`, 'error'),
        );
    }
  }

  private loginForm(uid: string, clientName: string, username?: string, error?: string): Page {
    return loginPage({
      action: this.interactionUrl(uid, 'login'),
      abortAction: this.interactionUrl(uid, 'abort'),
      csrf: this.csrf(uid),
      clientName,
      ...(username !== undefined ? { username } : {}),
      ...(error !== undefined ? { error } : {}),
    });
  }

  private async consentForm(details: Awaited<ReturnType<ProviderType['interactionDetails']>>): Promise<Page> {
    const accountId = details.session?.accountId;
    const account = accountId ? await this.findAccount(accountId) : undefined;
    const requested = String(details.params.scope ?? 'openid')
      .split(' ')
      .filter((s) => s !== '');
    return consentPage({
      action: this.interactionUrl(details.uid, 'consent'),
      csrf: this.csrf(details.uid),
      clientName: await this.clientName(details.params.client_id),
      userName: typeof account?.name === 'string' ? account.name : (accountId ?? 'you'),
      scopes: requested,
    });
  }

  private async submitLogin(request: FastifyRequest<UidRoute>, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const details = await this.interaction(request, reply, true);
    if (!details) return undefined;
    const uid = details.uid;
    const clientName = await this.clientName(details.params.client_id);
    if (details.prompt.name !== 'login') return reply.redirect(this.interactionUrl(uid), 303);
    const username = String(request.body.username ?? '').trim();
    const password = String(request.body.password ?? '');
    const nameKey = `name:${username.toLowerCase()}`;
    const addressKey = `addr:${request.ip}`;
    // Counted as failed before scrypt, forgiven when right: checking now and counting after the
    // scrypt would let any number of parallel guesses through before the first one is counted.
    const byName = this.byName.take(nameKey);
    const byAddress = this.byAddress.take(addressKey);
    const forgive = (): void => {
      byName.forgive();
      byAddress.forgive();
    };
    const wait = Math.max(byName.wait, byAddress.wait);
    if (wait > 0) {
      forgive();
      return this.send(reply, 429, this.loginForm(uid, clientName, username, `Too many attempts: try again in ${wait} s.`));
    }
    if (username === '' || password === '' || username.length > 200 || password.length > 1024) {
      forgive();
      return this.send(reply, 400, this.loginForm(uid, clientName, username, 'Type your user name and your password.'));
    }
    // PostgreSQL refuses NUL in text: such a name cannot exist, so it is a wrong one, told as any
    // other (and after the same scrypt), not a server error.
    const user = username.includes('\u0000')
      ? undefined
      : (
          await this.pool.query<LocalUser>(
            "SELECT id, name, email, password_hash, must_change_password, disabled_at FROM users WHERE issuer = 'local' AND name = $1",
            [username],
          )
        ).rows[0];
    // One scrypt whether or not the user exists, and one message: nothing tells which names exist.
    // A NUL in the password is wrong too: scrypt's HMAC pads its key with zeros, so "pw\0" would
    // match "pw".
    const ok = (await verifyPassword(user?.password_hash, password)) && !password.includes('\u0000');
    if (!ok || !user) return this.send(reply, 401, this.loginForm(uid, clientName, username, 'Wrong user name or password.'));
    byAddress.forgive();
    this.byName.clear(nameKey);
    if (user.disabled_at)
      return this.send(reply, 403, this.loginForm(uid, clientName, username, 'This account is disabled: ask an administrator.'));
    if (user.must_change_password) return this.send(reply, 200, this.passwordForm(uid, user));
    return this.finish(request, reply, { login: { accountId: user.id } });
  }

  private passwordForm(uid: string, user: { id: string; name: string }, error?: string): Page {
    const exp = Math.floor(Date.now() / 1000) + PASSWORD_CHANGE_TTL_SECONDS;
    const claim = Buffer.from(JSON.stringify({ uid, sub: user.id, exp })).toString('base64url');
    const sig = createHmac('sha256', this.changeKey).update(claim).digest('base64url');
    return changePasswordPage({
      action: this.interactionUrl(uid, 'password'),
      csrf: this.csrf(uid),
      change: `${claim}.${sig}`,
      username: user.name,
      ...(error !== undefined ? { error } : {}),
    });
  }

  /** The user behind a password-change token, if it is ours, for this interaction and not expired. */
  private changeTokenUser(token: string, uid: string): string | undefined {
    const [claim, sig] = token.split('.');
    if (!claim || !sig || !sameSecret(sig, createHmac('sha256', this.changeKey).update(claim).digest('base64url'))) return undefined;
    try {
      const c = JSON.parse(Buffer.from(claim, 'base64url').toString('utf8')) as { uid?: unknown; sub?: unknown; exp?: unknown };
      if (c.uid !== uid || typeof c.sub !== 'string' || typeof c.exp !== 'number' || c.exp < Date.now() / 1000) return undefined;
      return c.sub;
    } catch {
      return undefined;
    }
  }

  private async submitPasswordChange(request: FastifyRequest<UidRoute>, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const details = await this.interaction(request, reply, true);
    if (!details) return undefined;
    const uid = details.uid;
    const clientName = await this.clientName(details.params.client_id);
    const userId = this.changeTokenUser(String(request.body.change ?? ''), uid);
    if (!userId || details.prompt.name !== 'login') {
      return this.send(reply, 400, this.loginForm(uid, clientName, undefined, 'That form has expired: sign in again.'));
    }
    const r = await this.pool.query<LocalUser>(
      "SELECT id, name, email, password_hash, must_change_password, disabled_at FROM users WHERE issuer = 'local' AND id = $1",
      [userId],
    );
    const user = r.rows[0];
    if (!user || user.disabled_at)
      return this.send(reply, 403, this.loginForm(uid, clientName, undefined, 'This account is disabled: ask an administrator.'));
    // Changed meanwhile (another tab, or the real user while someone else holds the temporary
    // password): this form proved only the temporary password, which no longer signs anyone in.
    if (!user.must_change_password) {
      return this.send(
        reply,
        400,
        this.loginForm(uid, clientName, user.name, 'This password was already changed: sign in with the new one.'),
      );
    }
    const password = String(request.body.password ?? '');
    const confirm = String(request.body.confirm ?? '');
    let problem = passwordProblem(password, user.name);
    // Sign-in refuses it (see submitLogin): accepting it here would lock the account out.
    if (!problem && password.includes('\u0000')) problem = 'it contains a NUL character';
    if (!problem && password !== confirm) problem = 'the two passwords differ';
    if (!problem && (await verifyPassword(user.password_hash, password))) problem = 'choose a new password, not the one you were given';
    if (problem) return this.send(reply, 400, this.passwordForm(uid, user, `New password refused: ${problem}.`));
    // Only if still pending: of two forms submitted at once, one changes it and signs in; the
    // other is told as above (it must not sign in on the strength of the temporary password).
    const changed = await this.pool.query(
      'UPDATE users SET password_hash = $2, must_change_password = false WHERE id = $1 AND must_change_password AND password_hash IS NOT DISTINCT FROM $3',
      [user.id, await hashPassword(password), user.password_hash],
    );
    if (changed.rowCount !== 1) {
      return this.send(
        reply,
        400,
        this.loginForm(uid, clientName, user.name, 'This password was already changed: sign in with the new one.'),
      );
    }
    this.log.info({ user: user.name }, 'password changed at first sign-in');
    return this.finish(request, reply, { login: { accountId: user.id } });
  }

  private async submitConsent(request: FastifyRequest<UidRoute>, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const details = await this.interaction(request, reply, true);
    if (!details) return undefined;
    if (details.prompt.name !== 'consent') return reply.redirect(this.interactionUrl(details.uid), 303);
    if (request.body.decision !== 'allow') {
      return this.finish(request, reply, { error: 'access_denied', error_description: 'the user denied access' }, false);
    }
    const provider = this.provider!;
    const accountId = details.session?.accountId;
    const clientId = String(details.params.client_id);
    if (!accountId) return reply.redirect(this.interactionUrl(details.uid), 303);
    const grant = details.grantId ? await provider.Grant.find(details.grantId) : new provider.Grant({ accountId, clientId });
    if (!grant)
      return this.send(reply, 400, infoPage('Sign-in expired', 'This sign-in has expired: run `atelier auth login` again.', 'error'));
    const missing = details.prompt.details as {
      missingOIDCScope?: string[];
      missingOIDCClaims?: string[];
      missingResourceScopes?: Record<string, string[]>;
    };
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {}))
      grant.addResourceScope(indicator, scopes.join(' '));
    const grantId = await grant.save();
    return this.finish(request, reply, { consent: { grantId } });
  }

  private async submitAbort(request: FastifyRequest<UidRoute>, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const details = await this.interaction(request, reply, true);
    if (!details) return undefined;
    return this.finish(request, reply, { error: 'access_denied', error_description: 'the user cancelled the sign-in' }, false);
  }

  private async finish(
    request: FastifyRequest<UidRoute>,
    reply: FastifyReply,
    result: Parameters<ProviderType['interactionResult']>[2],
    merge = true,
  ): Promise<FastifyReply> {
    const returnTo = await this.provider!.interactionResult(request.raw, reply.raw, result, { mergeWithLastSubmission: merge });
    return reply.header('cache-control', 'no-store').redirect(returnTo, 303);
  }

  // ---------------------------------------------------------------- device pages (rendered by the provider)

  private xsrf(ctx: KoaContextWithOIDC): string {
    const state = ctx.oidc.session?.state as { secret?: unknown } | undefined;
    return typeof state?.secret === 'string' ? state.secret : '';
  }

  private userCodeInput(
    ctx: KoaContextWithOIDC,
    out: { error?: string; error_description?: string } | undefined,
    err: Error | undefined,
  ): void {
    const action = `${OIDC_PREFIX}/device`;
    const typed = (err as { userCode?: string } | undefined)?.userCode;
    let error: string | undefined;
    let status = 200;
    switch (err?.name) {
      case undefined:
        break;
      case 'NoCodeError':
        error = 'Type the code your terminal shows.';
        break;
      case 'NotFoundError':
        this.wrongCodes.add(ctx); // stays counted (see build)
        error = `The code ${typed ?? ''} is not valid: check the code in your terminal and type it again.`;
        status = 400;
        break;
      case 'ExpiredError':
        error = 'This code has expired: run `atelier auth login` again for a new one.';
        status = 400;
        break;
      case 'AlreadyUsedError':
        error = 'This code was already used: run `atelier auth login` again if you need to sign in.';
        status = 400;
        break;
      case 'AbortedError':
        this.render(ctx, 200, infoPage('Sign-in cancelled', 'Nothing was allowed: your terminal was told. You can close this page.'));
        return;
      default:
        error = `This sign-in failed (${out?.error_description ?? out?.error ?? 'unknown error'}): run \`atelier auth login\` again.`;
        status = ctx.status >= 400 ? ctx.status : 400;
    }
    this.render(
      ctx,
      status,
      userCodePage({ action, xsrf: this.xsrf(ctx), ...(typed ? { userCode: typed } : {}), ...(error ? { error } : {}) }),
    );
  }

  private userCodeConfirm(
    ctx: KoaContextWithOIDC,
    clientName: string | undefined,
    deviceInfo: Record<string, unknown>,
    userCode: string,
  ): void {
    const ip = typeof deviceInfo.ip === 'string' ? deviceInfo.ip : undefined;
    this.render(
      ctx,
      200,
      confirmCodePage({
        action: `${OIDC_PREFIX}/device`,
        xsrf: this.xsrf(ctx),
        userCode,
        clientName: clientName ?? CLI_CLIENT_NAME,
        ...(ip ? { requestedFrom: ip } : {}),
      }),
    );
  }

  private async deviceSuccess(ctx: KoaContextWithOIDC): Promise<void> {
    const accountId = ctx.oidc.session?.accountId;
    const account = accountId ? await this.findAccount(accountId) : undefined;
    const who = typeof account?.name === 'string' ? ` as ${account.name}` : '';
    this.render(ctx, 200, infoPage('Signed in', `You are signed in${who}. Go back to your terminal; you can close this page.`));
  }
}
