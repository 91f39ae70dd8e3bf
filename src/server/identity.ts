import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { AtelierError } from '../core/index.js';
import type { Pool } from '../db/index.js';
import {
  EmbeddedIssuer,
  JwtVerifier,
  loadExternalIssuerConfig,
  WEB_CALLBACK_PATH,
  WEB_CLIENT_ID,
  type ExternalIssuerConfig,
  type MasterKey,
  type TokenAuthority,
} from '../identity/index.js';
import type { WebSignIn } from './browserSessions.js';
import { authRoutes, type IssuerInfo } from './routes/auth.js';

/** Access tokens of the embedded issuer live 10 minutes; the CLI refreshes them silently. */
const ACCESS_TOKEN_TTL_SECONDS = 600;
const EMBEDDED_AUDIENCE = 'atelier';
const DISCOVERY_TIMEOUT_MS = 5000;
/** How long a call to the external issuer's token or revocation endpoint may take. */
const TOKEN_CALL_TIMEOUT_MS = 10_000;

export interface IdentityRuntime {
  routes: ((app: FastifyInstance) => void)[];
  /** Called once the public URL is known (after listen): how bearer JWTs are checked. */
  ready(publicUrl: string): Promise<TokenAuthority>;
  close(): Promise<void>;
  /** The dashboard's sign-in (authorization code + PKCE, the server being the client): against the embedded issuer or the external one. */
  web?: WebSignIn;
}

/** Reads an issuer's discovery document; an unreachable issuer is named in the error. */
async function discover(issuer: string): Promise<Record<string, unknown>> {
  const url = `${issuer}/.well-known/openid-configuration`;
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(DISCOVERY_TIMEOUT_MS), headers: { accept: 'application/json' } });
  } catch (err) {
    throw new Error(
      `the identity provider at ${url} is unreachable (${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message})`,
    );
  }
  if (!res.ok) throw new Error(`the identity provider at ${url} answered ${res.status}`);
  return (await res.json()) as Record<string, unknown>;
}

/**
 * The server's identity: the embedded OIDC issuer (default), or an external one named by
 * ATELIER_IDENTITY_CONFIG. Either way the CLI logs in through the server's relay endpoints and
 * the server verifies access tokens with jose.
 */
export async function startIdentity(
  identityConfig: string | undefined,
  pool: Pool,
  masterKey: MasterKey,
  logger: FastifyBaseLogger,
  isLeader?: () => boolean,
): Promise<IdentityRuntime> {
  if (identityConfig) {
    const ext = await loadExternalIssuerConfig(identityConfig);
    let metadata: Promise<Record<string, unknown>> | undefined;
    // Discovery is read when first needed and again after a failure: a server starts even
    // while its identity provider is down, and API tokens keep working meanwhile.
    const meta = (): Promise<Record<string, unknown>> => {
      metadata ??= discover(ext.issuer).catch((err: unknown) => {
        metadata = undefined;
        throw err;
      });
      return metadata;
    };
    let publicUrl = '';
    const info: IssuerInfo = {
      kind: 'external',
      issuer: ext.issuer,
      clientId: ext.clientId,
      scope: ext.scope,
      endpointOrigins: ext.endpointOrigins,
      ...(ext.clientSecret !== undefined ? { clientSecret: ext.clientSecret } : {}),
      publicUrl: () => publicUrl,
      idTokenAlg: async () => {
        const algs = (await meta()).id_token_signing_alg_values_supported;
        const list = Array.isArray(algs) ? algs.filter((a): a is string => typeof a === 'string' && a !== 'none') : [];
        return list.length === 0 || list.includes('RS256') ? undefined : list[0];
      },
      endpoints: async () => {
        const m = await meta();
        return {
          device_authorization_endpoint: String(m.device_authorization_endpoint ?? ''),
          token_endpoint: String(m.token_endpoint ?? ''),
          ...(typeof m.revocation_endpoint === 'string' ? { revocation_endpoint: m.revocation_endpoint } : {}),
        };
      },
    };
    return {
      routes: [(app) => authRoutes(app, info)],
      web: externalWebSignIn(ext, meta, () => publicUrl),
      async ready(url) {
        publicUrl = url;
        const verifier = new JwtVerifier({
          issuer: ext.issuer,
          audience: ext.audience,
          jwksUri: async () => {
            const m = await meta();
            if (typeof m.jwks_uri !== 'string') throw new Error(`the identity provider ${ext.issuer} publishes no jwks_uri`);
            return m.jwks_uri;
          },
        });
        logger.info({ issuer: ext.issuer }, 'identity: external OIDC issuer');
        return { kind: 'external', issuer: ext.issuer, verifier, config: ext };
      },
      close: async () => undefined,
    };
  }

  const issuer = new EmbeddedIssuer({
    pool,
    masterKey,
    logger,
    audience: EMBEDDED_AUDIENCE,
    accessTokenTtlSeconds: ACCESS_TOKEN_TTL_SECONDS,
    ...(isLeader ? { isLeader } : {}),
  });
  let publicUrl = '';
  const info: IssuerInfo = {
    kind: 'embedded',
    get issuer() {
      return issuer.issuer;
    },
    clientId: 'atelier-cli',
    scope: 'openid profile offline_access',
    publicUrl: () => publicUrl,
    endpoints: async () => issuer.endpoints(),
    // Relayed requests are answered in this process: the server never calls its own public URL.
    dispatch: (url, form, ip) => issuer.dispatch(url, form, ip),
  };
  let verifier: JwtVerifier | undefined;
  const rotate = async (): Promise<{ kid: string }> => {
    const r = await issuer.rotateKeys();
    // This server's verifier reads the published keys again at once (others on a key id it lacks).
    verifier?.reload();
    return r;
  };
  return {
    routes: [(app) => issuer.registerRoutes(app), (app) => authRoutes(app, info, rotate)],
    async ready(url) {
      publicUrl = url;
      await issuer.start(url);
      verifier = new JwtVerifier({ issuer: issuer.issuer, audience: EMBEDDED_AUDIENCE, localJwks: () => issuer.publicJwks() });
      return { kind: 'embedded', issuer: issuer.issuer, verifier };
    },
    close: () => issuer.close(),
    web: {
      clientId: WEB_CLIENT_ID,
      scope: 'openid profile',
      redirectUri: () => `${issuer.publicUrl()}${WEB_CALLBACK_PATH}`,
      endpoints: async () => issuer.endpoints(),
      dispatch: (url, form, ip) => issuer.dispatch(url, form, ip),
    },
  };
}

/**
 * The dashboard's sign-in against an external issuer: the browser goes to the issuer's
 * authorization endpoint, and the server redeems the code (and later refreshes and revokes) at
 * its token and revocation endpoints, adding the client secret when one is configured. Every
 * endpoint must be on the issuer's own origin or one the administrator listed
 * (`endpointOrigins`), whatever discovery says: the browser is never sent, and the secret never
 * posted, anywhere else.
 */
function externalWebSignIn(ext: ExternalIssuerConfig, meta: () => Promise<Record<string, unknown>>, publicUrl: () => string): WebSignIn {
  const origins = new Set([new URL(ext.issuer).origin, ...ext.endpointOrigins]);
  const checked = (m: Record<string, unknown>, name: string, required: boolean): string | undefined => {
    const url = m[name];
    if (url === undefined && !required) return undefined;
    let origin: string | undefined;
    try {
      origin = typeof url === 'string' ? new URL(url).origin : undefined;
    } catch {
      origin = undefined;
    }
    if (!origin)
      throw new AtelierError(
        'UNAVAILABLE',
        `the identity provider ${ext.issuer} publishes no ${name.replace(/_/g, ' ')}: enable the authorization code flow for client ${ext.webClientId}`,
      );
    if (!origins.has(origin))
      throw new AtelierError(
        'UNAVAILABLE',
        `the identity provider ${ext.issuer} names ${String(url)} as its ${name.replace(/_/g, ' ')}, outside its own origin: refused, ask the administrator (endpointOrigins)`,
      );
    return url as string;
  };
  return {
    clientId: ext.webClientId,
    scope: ext.scope,
    redirectUri: () => `${publicUrl().replace(/\/+$/, '')}${WEB_CALLBACK_PATH}`,
    async endpoints() {
      let m: Record<string, unknown>;
      try {
        m = await meta();
      } catch (err) {
        throw new AtelierError('UNAVAILABLE', `cannot reach the identity provider: ${(err as Error).message}`, { issuer: ext.issuer });
      }
      const revocation = checked(m, 'revocation_endpoint', false);
      return {
        authorization_endpoint: checked(m, 'authorization_endpoint', true)!,
        token_endpoint: checked(m, 'token_endpoint', true)!,
        ...(revocation !== undefined ? { revocation_endpoint: revocation } : {}),
      };
    },
    async dispatch(url, form) {
      const body = new URLSearchParams(form);
      if (ext.clientSecret !== undefined) body.set('client_secret', ext.clientSecret);
      try {
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
          body: body.toString(),
          redirect: 'manual',
          signal: AbortSignal.timeout(TOKEN_CALL_TIMEOUT_MS),
        });
        return { status: res.status, body: await res.text() };
      } catch (err) {
        const cause = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message;
        throw new AtelierError(
          'UNAVAILABLE',
          `the identity provider at ${url} is unreachable (${cause}): try again, or ask the administrator`,
        );
      }
    },
  };
}
