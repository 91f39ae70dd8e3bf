import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Provider from 'oidc-provider';

/**
 * A second, independent OIDC issuer for tests of the "external issuer" mode: a real
 * oidc-provider (the library Keycloak-less deployments use), in this test process, with its
 * development login pages (any password), a public client with the device grant (and one with
 * the authorization code grant, for the dashboard), JWT access
 * tokens for audience `atelier-ext`, and a `groups` claim in them as Keycloak's group mapper
 * would add. It stands in for the company's identity provider, not for Atelier's own.
 */
export interface ExternalIssuer {
  issuer: string;
  clientId: string;
  /** The dashboard's client (authorization code + PKCE). */
  webClientId: string;
  audience: string;
  close(): Promise<void>;
}

export async function startExternalIssuer(
  accounts: Record<string, { groups: string[]; email?: string }>,
  /** An issuer that gives no refresh token and access tokens of `accessTokenSeconds`, as some are configured. */
  opts: { refreshTokens?: boolean; accessTokenSeconds?: number } = {},
): Promise<ExternalIssuer> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const audience = 'atelier-ext';
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: 'atelier-ext-cli',
        token_endpoint_auth_method: 'none',
        grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
        response_types: [],
        redirect_uris: [],
        id_token_signed_response_alg: 'ES256',
      },
      {
        // The dashboard's client: authorization code + PKCE, back to any Atelier server on this
        // host (a native client's loopback redirect URI matches any port: RFC 8252 §7.3).
        client_id: 'atelier-ext-web',
        application_type: 'native',
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: ['http://127.0.0.1/auth/web/callback'],
        id_token_signed_response_alg: 'ES256',
      },
    ],
    features: {
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => 'urn:atelier:ext',
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: 'openid profile email',
          audience,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'ES256' } },
        }),
      },
    },
    jwks: { keys: [await esKey()] },
    scopes: ['openid', 'profile', 'email', 'offline_access'],
    claims: { openid: ['sub'], profile: ['preferred_username'], email: ['email'] },
    issueRefreshToken: () => opts.refreshTokens ?? true,
    ...(opts.accessTokenSeconds !== undefined ? { ttl: { AccessToken: opts.accessTokenSeconds } } : {}),
    async findAccount(_ctx, id) {
      const a = accounts[id];
      if (!a) return undefined;
      return { accountId: id, claims: () => ({ sub: id, preferred_username: id, email: a.email ?? `${id}@example.com` }) };
    },
    async extraTokenClaims(_ctx, token) {
      const id = (token as { accountId?: string }).accountId;
      const a = id ? accounts[id] : undefined;
      return a ? { groups: a.groups, preferred_username: id } : {};
    },
  });
  server.on('request', provider.callback());
  return {
    issuer,
    clientId: 'atelier-ext-cli',
    webClientId: 'atelier-ext-web',
    audience,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function esKey(): Promise<Record<string, unknown>> {
  const { generateKeyPair, exportJWK } = await import('jose');
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  return { ...(await exportJWK(privateKey)), kid: 'ext-1', alg: 'ES256', use: 'sig' };
}
