import type { Whoami } from '../../../core/index.js';
import { sdkFor } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { keyValues } from '../../output.js';

/** GET /v1/auth/whoami */
export type { Whoami };

export interface AuthStatus extends Whoami {
  context: string;
  url: string;
}

/** `atelier auth status`: who the server says we are, in which tenant, with which role, until when. */
export async function authStatus(ctx: CommandContext): Promise<AuthStatus> {
  const target = await ctx.target();
  const me = await sdkFor(target).call('whoami');
  // A silent refresh may have happened: report the expiry of the token now in use.
  const local = target.credential?.kind === 'oidc' ? target.credential.expiresAt : undefined;
  return { context: target.context, url: target.url, ...me, expiresAt: local ?? me.expiresAt };
}

function inWords(iso: string): string {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  if (s <= 0) return `${iso} (expired)`;
  const d =
    s >= 86400 ? `${Math.floor(s / 86400)} d` : s >= 3600 ? `${Math.floor(s / 3600)} h` : s >= 60 ? `${Math.floor(s / 60)} min` : `${s} s`;
  return `${iso} (in ${d})`;
}

export function statusText(s: AuthStatus): string {
  const pairs: [string, string][] = [
    ['context', s.context],
    ['server', s.url],
    ['user', s.user.name],
    ['tenant', s.tenant.name],
    ['role', s.role],
    ['kind', s.kind === 'agent' ? `agent (workshop ${s.workshopId ?? '?'})` : 'user'],
    ['via', s.via === 'oidc' ? 'login (OIDC)' : 'API token'],
    ['expires', s.expiresAt ? inWords(s.expiresAt) : s.via === 'oidc' ? 'unknown' : 'never'],
  ];
  if (s.via === 'oidc') pairs.push(['refresh', 'automatic']);
  if (s.tenants.length > 1) pairs.push(['tenants', s.tenants.map((t) => `${t.name} (${t.role})`).join(', ')]);
  return keyValues(pairs);
}
