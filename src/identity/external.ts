import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { describeZodError } from '../core/index.js';
import { atLeast, ROLES, type Role } from './roles.js';

/**
 * An external OIDC issuer (Keycloak, Entra ID, Google, …), configured by a YAML file given as
 * ATELIER_IDENTITY_CONFIG or `atelier server start --identity-config FILE`:
 *
 *   issuer: https://sso.example.com/realms/acme
 *   clientId: atelier-cli            # a public client with the device grant enabled
 *   webClientId: atelier-web         # the dashboard's client: authorization code + PKCE, redirect URI <public URL>/auth/web/callback (default: clientId)
 *   clientSecretFile: /etc/atelier/client-secret   # only for a confidential client (the server adds it when relaying)
 *   audience: atelier                # the `aud` access tokens carry (default: clientId)
 *   groupsClaim: groups              # claim listing the user's groups (default: groups)
 *   usernameClaim: preferred_username
 *   endpointOrigins: [https://oauth2.googleapis.com]   # only if its endpoints are on another origin (Google)
 *   groups:                          # group → tenant and role; the strongest role per tenant wins
 *     - { group: platform, tenant: acme, role: admin }
 *     - { group: developers, tenant: acme, role: member }
 *
 * A user whose groups map to no tenant can log in but is refused on every route, with a message.
 */
const IdentityFile = z.strictObject({
  issuer: z.url({ protocol: /^https?$/ }),
  clientId: z.string().min(1),
  webClientId: z.string().min(1).optional(),
  clientSecret: z.string().min(1).optional(),
  clientSecretFile: z.string().min(1).optional(),
  audience: z.string().min(1).optional(),
  groupsClaim: z.string().min(1).default('groups'),
  usernameClaim: z.string().min(1).default('preferred_username'),
  scope: z.string().min(1).default('openid profile email offline_access'),
  endpointOrigins: z.array(z.url({ protocol: /^https?$/ })).default([]),
  groups: z
    .array(z.strictObject({ group: z.string().min(1), tenant: z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/), role: z.enum(ROLES) }))
    .default([]),
});

export interface ExternalIssuerConfig {
  issuer: string;
  clientId: string;
  /**
   * The client the dashboard signs in with (authorization code + PKCE, the server being the
   * client): the CLI's own when the issuer lets one client have both grants, else a second one.
   * A configured client secret is sent for both.
   */
  webClientId: string;
  clientSecret: string | undefined;
  audience: string;
  groupsClaim: string;
  usernameClaim: string;
  scope: string;
  /** Origins besides the issuer's own that may serve its token and device endpoints. */
  endpointOrigins: string[];
  groups: { group: string; tenant: string; role: Role }[];
}

export async function loadExternalIssuerConfig(path: string): Promise<ExternalIssuerConfig> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read the identity config ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const { parse } = await import('yaml');
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (err) {
    throw new Error(`${path} is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const r = IdentityFile.safeParse(doc);
  if (!r.success) {
    // The message names the field already: `file: issuer: Invalid input…`.
    throw new Error(`${path}: ${describeZodError(r.error).message}`);
  }
  const c = r.data;
  let clientSecret = c.clientSecret;
  if (c.clientSecretFile) {
    try {
      clientSecret = readFileSync(c.clientSecretFile, 'utf8').trim();
    } catch (err) {
      throw new Error(
        `cannot read clientSecretFile ${c.clientSecretFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      );
    }
  }
  return {
    issuer: c.issuer.replace(/\/+$/, ''),
    clientId: c.clientId,
    webClientId: c.webClientId ?? c.clientId,
    clientSecret,
    audience: c.audience ?? c.clientId,
    groupsClaim: c.groupsClaim,
    usernameClaim: c.usernameClaim,
    scope: c.scope,
    endpointOrigins: c.endpointOrigins.map((u) => new URL(u).origin),
    groups: c.groups,
  };
}

/** The tenants and roles a set of groups gives: for each tenant, the strongest mapped role. */
export function membershipsFromGroups(config: Pick<ExternalIssuerConfig, 'groups'>, groups: unknown): Map<string, Role> {
  const names = new Set(
    Array.isArray(groups) ? groups.filter((g): g is string => typeof g === 'string') : typeof groups === 'string' ? [groups] : [],
  );
  const out = new Map<string, Role>();
  for (const m of config.groups) {
    if (!names.has(m.group)) continue;
    const had = out.get(m.tenant);
    if (!had || atLeast(m.role, had)) out.set(m.tenant, m.role);
  }
  return out;
}
