import { AtelierError, type CreateTokenRequest } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { keyValues, table } from '../../output.js';
import { checkRole } from '../users/manage.js';

/** An API token as the server lists it (never its secret). */
export interface ApiToken {
  id: string;
  name: string;
  /** The user the token acts as. */
  user?: string;
  role: string;
  tenant: string;
  workshopId: string | null;
  expiresAt: string | null;
  createdAt: string;
  lastUsedAt?: string | null;
  revoked?: boolean;
}

const UNIT: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };

/** `--expires 30d|12h|90m|never` → seconds, or null for never. */
export function parseExpiry(value: string): number | null {
  if (value === 'never') return null;
  const m = /^(\d{1,6})([smhdwy])$/.exec(value.trim());
  const seconds = m ? Number(m[1]) * UNIT[m[2]!]! : NaN;
  if (!m || seconds < 60 || seconds > 10 * UNIT.y!)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `--expires must be a duration such as 12h, 30d or 1y (from 1m to 10y), or "never"; got "${value}"`,
      { field: 'expires' },
    );
  return seconds;
}

/** `atelier tokens create [--name N] [--scope ROLE] [--expires D|never] [--workshop ID]`: the token is shown once. */
export async function createToken(
  ctx: CommandContext,
  flags: { name?: string; scope?: string; expires?: string; workshop?: string; user?: string; tenant?: string },
): Promise<ApiToken & { token: string }> {
  checkRole(flags.scope, '--scope');
  const body: CreateTokenRequest = {};
  if (flags.name !== undefined) body.name = flags.name;
  // checkRole refused anything but a role.
  if (flags.scope !== undefined) body.role = flags.scope as NonNullable<CreateTokenRequest['role']>;
  if (flags.expires !== undefined) body.expiresInSeconds = parseExpiry(flags.expires);
  if (flags.workshop !== undefined) body.workshopId = flags.workshop;
  if (flags.user !== undefined) body.user = flags.user;
  if (flags.tenant !== undefined) body.tenant = flags.tenant;
  return (await ctx.api()).call('createToken', { body });
}

/** `atelier server rotate-keys`: a new signing key for the embedded issuer; nobody is logged out. */
export async function rotateKeys(ctx: CommandContext): Promise<{ kid: string }> {
  return (await ctx.api()).call('rotateSigningKeys');
}

/** `atelier tokens list` */
export async function listTokens(ctx: CommandContext): Promise<ApiToken[]> {
  return (await (await ctx.api()).call('listTokens')).items;
}

/** `atelier tokens revoke ID` */
export async function revokeToken(ctx: CommandContext, id: string): Promise<{ id: string; revoked: true }> {
  return (await ctx.api()).call('revokeToken', { params: { id } });
}

export function tokenTable(tokens: ApiToken[]): string {
  if (tokens.length === 0) return 'No API tokens.';
  return table(tokens, [
    { header: 'ID', get: (t) => t.id },
    { header: 'NAME', get: (t) => t.name },
    { header: 'USER', get: (t) => t.user ?? '' },
    { header: 'SCOPE', get: (t) => t.role },
    { header: 'TENANT', get: (t) => t.tenant },
    { header: 'WORKSHOP', get: (t) => t.workshopId ?? '' },
    { header: 'EXPIRES', get: (t) => t.expiresAt ?? 'never' },
    { header: 'LAST USED', get: (t) => t.lastUsedAt ?? 'never' },
    { header: 'STATUS', get: (t) => (t.revoked ? 'revoked' : t.expiresAt && Date.parse(t.expiresAt) < Date.now() ? 'expired' : 'active') },
  ]);
}

export function createdTokenText(t: ApiToken & { token: string }): string {
  return `${keyValues([
    ['id', t.id],
    ['name', t.name],
    ['scope', t.role],
    ['tenant', t.tenant],
    ...(t.workshopId ? ([['workshop', t.workshopId]] as [string, string][]) : []),
    ['expires', t.expiresAt ?? 'never'],
    ['token', t.token],
  ])}\nThis token is shown once: store it now (for example \`atelier context add NAME --url URL --token-stdin\`).`;
}
