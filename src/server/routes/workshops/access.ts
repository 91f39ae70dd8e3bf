import type { RouteAccess } from '../../../identity/index.js';

// Route-level rules; the per-workshop rule (tenant, owner, agent's own workshop) is the service's.
export const READ: RouteAccess = { role: 'viewer', agent: true };
export const OPERATE: RouteAccess = { role: 'member', agent: true };
export const MEMBER: RouteAccess = { role: 'member' };

export type IdParams = { Params: { id: string } };
