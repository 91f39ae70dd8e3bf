import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AtelierError } from '../../core/index.js';

/** The issuer's endpoints the relay forwards to (from discovery for an external issuer). */
export interface IssuerEndpoints {
  device_authorization_endpoint: string;
  token_endpoint: string;
  revocation_endpoint?: string;
}

/** An answer of the issuer, passed through to the CLI unchanged. */
export interface RelayedResponse {
  status: number;
  contentType: string | undefined;
  body: string;
}

/** The issuer behind the relay: the embedded one, or an external one (Keycloak, Entra ID, …). */
export interface IssuerInfo {
  kind: 'embedded' | 'external';
  issuer: string;
  clientId: string;
  /** Added to relayed requests for a confidential client; never sent to the CLI. */
  clientSecret?: string;
  /** What the CLI asks for (default 'openid profile offline_access'). */
  scope?: string;
  /** The server's public URL, known once it listens. */
  publicUrl(): string;
  endpoints(): Promise<IssuerEndpoints> | IssuerEndpoints;
  /** The embedded issuer answers in-process (no round trip through the server's own public URL). */
  dispatch?(url: string, form: string, remoteAddress: string): Promise<RelayedResponse>;
  /** Origins besides the issuer's own that may serve its endpoints (identity config `endpointOrigins`). */
  endpointOrigins?: string[];
  /** The issuer's ID token signing algorithm, when the CLI must be told (not RS256). */
  idTokenAlg?(): Promise<string | undefined>;
}

const DEFAULT_SCOPE = 'openid profile offline_access';
const RELAY_TIMEOUT_MS = 10_000;
const FORM = 'application/x-www-form-urlencoded';
const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
/** What the CLI may send to each endpoint; anything else is dropped, not forwarded. */
const ALLOWED = {
  device_authorization_endpoint: new Set(['client_id', 'scope', 'audience', 'resource']),
  token_endpoint: new Set(['client_id', 'grant_type', 'device_code', 'refresh_token', 'scope', 'resource']),
  revocation_endpoint: new Set(['client_id', 'token', 'token_type_hint']),
} as const;

type Endpoint = keyof typeof ALLOWED;

/** An OAuth error in the shape the CLI's OAuth client reads (RFC 6749 §5.2). */
function oauthError(reply: FastifyReply, status: number, error: string, description: string): FastifyReply {
  return reply.status(status).header('cache-control', 'no-store').send({ error, error_description: description });
}

function originOf(url: string): string | undefined {
  try {
    return new URL(url).origin;
  } catch {
    return undefined;
  }
}

/**
 * The CLI's sign-in goes through the server: GET /v1/auth/config says which issuer and client to
 * use, and device code, token (device_code and refresh_token grants) and revocation requests are
 * relayed to the issuer, adding the client secret when one is configured. The issuer's answers —
 * RFC 8628 errors included (authorization_pending, slow_down, expired_token, access_denied) —
 * are passed through unchanged. All public: they are how one gets a token in the first place.
 * `rotate` (embedded issuer only) backs POST /v1/admin/signing-keys/rotate.
 */
export function authRoutes(app: FastifyInstance, info: IssuerInfo, rotate?: () => Promise<{ kid: string }>): void {
  const base = (): string => info.publicUrl().replace(/\/+$/, '');

  app.get('/v1/auth/config', { config: { access: 'public' } }, async () => ({
    kind: info.kind,
    issuer: info.issuer,
    clientId: info.clientId,
    scope: info.scope ?? DEFAULT_SCOPE,
    deviceAuthorizationEndpoint: `${base()}/v1/auth/device/code`,
    tokenEndpoint: `${base()}/v1/auth/device/token`,
    revocationEndpoint: `${base()}/v1/auth/revoke`,
    ...(info.idTokenAlg ? { idTokenAlg: await info.idTokenAlg().catch(() => undefined) } : {}),
  }));

  const endpointOf = async (name: Endpoint): Promise<string | undefined> => {
    let endpoints: IssuerEndpoints;
    try {
      endpoints = await info.endpoints();
    } catch (err) {
      throw new AtelierError('UNAVAILABLE', `cannot reach the identity provider: ${(err as Error).message}`, { issuer: info.issuer });
    }
    const url = endpoints[name];
    if (!url) return undefined;
    // The form may carry the client secret: it goes to the issuer's own origin only, whatever
    // discovery (or a tampered discovery answer) says.
    // (Issuers that serve their endpoints elsewhere, as Google does, are listed by the admin.)
    const issuerOrigin = originOf(info.issuer);
    const origin = originOf(url);
    if (!issuerOrigin || !origin || (origin !== issuerOrigin && !(info.endpointOrigins ?? []).includes(origin))) {
      throw new AtelierError(
        'UNAVAILABLE',
        `the identity provider ${info.issuer} names ${url} as its ${name.replace(/_/g, ' ')}, outside its own origin: refused, ask the administrator`,
        { issuer: info.issuer, url },
      );
    }
    return url;
  };

  const relay = async (name: Endpoint, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const params = request.body;
    if (!(params instanceof URLSearchParams)) {
      return oauthError(reply, 400, 'invalid_request', `send the parameters as ${FORM} (RFC 6749)`);
    }
    // RFC 6749 §3.1: no parameter more than once. Checking the first value and forwarding all
    // would let a second one reach the issuer unchecked (a second client_id, grant_type, …).
    const seen = new Set<string>();
    for (const k of params.keys()) {
      if (seen.has(k)) return oauthError(reply, 400, 'invalid_request', `parameter ${JSON.stringify(k)} is included more than once`);
      seen.add(k);
    }
    const form = new URLSearchParams();
    for (const [k, v] of params) if (ALLOWED[name].has(k)) form.append(k, v);
    const clientId = form.get('client_id');
    if (clientId === null) form.set('client_id', info.clientId);
    else if (clientId !== info.clientId) {
      return oauthError(reply, 401, 'invalid_client', `this server's sign-in client is "${info.clientId}", not "${clientId}"`);
    }
    if (name === 'token_endpoint') {
      const grant = form.get('grant_type');
      if (grant !== DEVICE_CODE_GRANT && grant !== 'refresh_token') {
        return oauthError(reply, 400, 'unsupported_grant_type', `grant_type must be ${DEVICE_CODE_GRANT} or refresh_token`);
      }
    }
    if (info.clientSecret !== undefined) form.set('client_secret', info.clientSecret);

    const url = await endpointOf(name);
    if (!url) {
      if (name === 'revocation_endpoint') {
        // Nothing to revoke at: the CLI forgets its tokens anyway (RFC 7009 answers 200 too).
        return reply.status(200).header('cache-control', 'no-store').send({});
      }
      throw new AtelierError(
        'UNAVAILABLE',
        `the identity provider ${info.issuer} does not offer ${name.replace(/_/g, ' ')}: enable the device flow for client ${info.clientId}`,
      );
    }

    let res: RelayedResponse;
    if (info.dispatch) {
      res = await info.dispatch(url, form.toString(), request.ip);
    } else {
      try {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': FORM, accept: 'application/json' },
          body: form.toString(),
          redirect: 'manual',
          signal: AbortSignal.timeout(RELAY_TIMEOUT_MS),
        });
        res = { status: r.status, contentType: r.headers.get('content-type') ?? undefined, body: await r.text() };
      } catch (err) {
        const cause = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message;
        throw new AtelierError(
          'UNAVAILABLE',
          `the identity provider at ${url} is unreachable (${cause}): try again, or ask the administrator`,
          {
            url,
          },
        );
      }
    }
    if (res.status >= 500) {
      request.log.warn({ url, status: res.status }, 'identity provider error');
      throw new AtelierError('UNAVAILABLE', `the identity provider at ${url} answered ${res.status}: try again, or ask the administrator`, {
        url,
      });
    }
    void reply.status(res.status).header('cache-control', 'no-store');
    if (res.contentType) void reply.header('content-type', res.contentType);
    return reply.send(res.body);
  };

  void app.register(async (scope) => {
    // OAuth endpoints take forms (RFC 6749, RFC 8628); any other body is answered in OAuth's terms.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(FORM, { parseAs: 'string', bodyLimit: 16 << 10 }, (_request, body, done) => {
      done(null, new URLSearchParams(body as string));
    });
    scope.addContentTypeParser('*', { parseAs: 'string', bodyLimit: 16 << 10 }, (_request, _body, done) => done(null, undefined));
    const config = { access: 'public' as const };
    scope.post('/v1/auth/device/code', { config }, (request, reply) => relay('device_authorization_endpoint', request, reply));
    scope.post('/v1/auth/device/token', { config }, (request, reply) => relay('token_endpoint', request, reply));
    scope.post('/v1/auth/revoke', { config }, (request, reply) => relay('revocation_endpoint', request, reply));
  });

  app.post('/v1/admin/signing-keys/rotate', { config: { access: { role: 'admin', platform: true } } }, async () => {
    if (!rotate) {
      throw new AtelierError('UNSUPPORTED', `this server uses the external identity provider ${info.issuer}: rotate its keys there`);
    }
    return rotate();
  });
}
