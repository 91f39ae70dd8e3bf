import { AtelierError, type AddUserRequest } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { keyValues, table } from '../../output.js';

/** A user as the server lists it. */
export interface User {
  id: string;
  name: string;
  issuer: string;
  email: string | null;
  disabled: boolean;
  memberships: { tenant: string; role: string }[];
  createdAt: string;
}

const ROLES = ['viewer', 'member', 'maintainer', 'admin'] as const;

/** Refuses a role the server does not know before any request (the server checks it too). */
export function checkRole(role: string | undefined, flag: string): void {
  if (role !== undefined && !(ROLES as readonly string[]).includes(role))
    throw new AtelierError('INVALID_ARGUMENT', `${flag} must be one of ${ROLES.join(', ')}, got "${role}"`, {
      field: flag.replace(/^--/, ''),
    });
}

/** `atelier users add NAME [--role R] [--tenant T]`: the one-time temporary password is shown once. */
export async function addUser(
  ctx: CommandContext,
  name: string,
  flags: { role?: string; tenant?: string; email?: string },
): Promise<{ user: User; temporaryPassword: string | null }> {
  checkRole(flags.role, '--role');
  // The role is the server's default (member) unless given; checkRole refused anything but a role.
  const body: Partial<AddUserRequest> & { name: string } = { name };
  if (flags.role) body.role = flags.role as AddUserRequest['role'];
  if (flags.tenant) body.tenant = flags.tenant;
  if (flags.email !== undefined) body.email = flags.email;
  return (await ctx.api()).call('addUser', { body });
}

/** `atelier users list` */
export async function listUsers(ctx: CommandContext): Promise<User[]> {
  return (await (await ctx.api()).call('listUsers')).items;
}

/** `atelier users edit NAME --email ADDRESS | --no-email` */
export async function editUser(ctx: CommandContext, name: string, flags: { email?: string | false }): Promise<User> {
  if (flags.email === undefined)
    throw new AtelierError('INVALID_ARGUMENT', 'say what to change: --email ADDRESS, or --no-email to remove the address', {
      field: 'email',
    });
  return (await ctx.api()).call('setUserEmail', { params: { user: name }, body: { email: flags.email === false ? null : flags.email } });
}

/** `atelier users disable NAME`: the user can no longer log in, and their sessions stop refreshing. */
export async function disableUser(ctx: CommandContext, name: string): Promise<User> {
  return (await ctx.api()).call('disableUser', { params: { user: name } });
}

const roles = (u: User): string => u.memberships.map((m) => `${m.tenant}:${m.role}`).join(', ');

export function userTable(users: User[]): string {
  if (users.length === 0) return 'No users.';
  return table(users, [
    { header: 'NAME', get: (u) => u.name },
    { header: 'ROLES', get: roles },
    { header: 'EMAIL', get: (u) => u.email ?? '-' },
    { header: 'ISSUER', get: (u) => u.issuer },
    { header: 'STATUS', get: (u) => (u.disabled ? 'disabled' : 'active') },
    { header: 'CREATED', get: (u) => u.createdAt },
  ]);
}

export function addedUserText(r: { user: User; temporaryPassword: string | null }): string {
  const pairs: [string, string][] = [
    ['user', r.user.name],
    ['roles', roles(r.user)],
  ];
  if (!r.temporaryPassword) return keyValues(pairs);
  pairs.push(['temporary password', r.temporaryPassword]);
  return `${keyValues(pairs)}\nThis password is shown once: give it to ${r.user.name}, who must change it at the first login (\`atelier auth login\`).`;
}

export function userText(u: User): string {
  return keyValues([
    ['user', u.name],
    ['roles', roles(u)],
    ['email', u.email ?? '(none: Slack decisions refused)'],
    ['status', u.disabled ? 'disabled' : 'active'],
  ]);
}
