/** The four roles, weakest first. A role includes every right of the roles before it. */
import { ROLES } from '../core/index.js';

export { ROLES };
export type Role = (typeof ROLES)[number];

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (ROLES as readonly string[]).includes(value);
}

export function roleRank(role: Role): number {
  return ROLES.indexOf(role);
}

/** True when `role` has at least the rights of `needed`. */
export function atLeast(role: Role, needed: Role): boolean {
  return roleRank(role) >= roleRank(needed);
}

/** The weaker of two roles (a token's cap and its user's role). */
export function weaker(a: Role, b: Role): Role {
  return roleRank(a) <= roleRank(b) ? a : b;
}
