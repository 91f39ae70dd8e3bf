import { AtelierError } from '../core/index.js';
import { atLeast, type Role } from './roles.js';

/** Who is calling, as established by authentication (see principal.ts). */
export interface Principal {
  /** `agent`: a token issued to one workshop; it acts only there and never decides an approval. */
  kind: 'user' | 'agent';
  userId: string;
  userName: string;
  tenantId: string;
  tenantName: string;
  /** Effective role in the tenant: the user's role, capped by the token's scope. */
  role: Role;
  workshopId: string | null;
  tokenId: string | null;
  via: 'api-token' | 'oidc';
  expiresAt: string | null;
}

/**
 * What a route requires, declared on every route (`config: { access }`); a route without it is
 * refused at start-up. `agent: true` lets agent tokens through to the per-workshop check.
 */
export type RouteAccess = 'public' | 'authenticated' | { role: Role; agent?: boolean; platform?: boolean };

/**
 * The tenant every server has. Its admins administer the server itself (signing keys); admins
 * of other tenants administer only their tenant.
 */
export const PLATFORM_TENANT_ID = 'tn-default';

export function isRouteAccess(value: unknown): value is RouteAccess {
  if (value === 'public' || value === 'authenticated') return true;
  return typeof value === 'object' && value !== null && typeof (value as { role?: unknown }).role === 'string';
}

export function checkRouteAccess(access: RouteAccess, p: Principal): void {
  if (access === 'public' || access === 'authenticated') return;
  if (p.kind === 'agent') {
    if (!access.agent) throw new AtelierError('PERMISSION_DENIED', 'an agent token cannot do this: it acts only on its own workshop');
    return;
  }
  if (access.platform && p.tenantId !== PLATFORM_TENANT_ID)
    throw new AtelierError('PERMISSION_DENIED', 'this is a server-wide operation: it needs the admin role in the default tenant');
  if (!atLeast(p.role, access.role))
    throw new AtelierError('PERMISSION_DENIED', `this needs the ${access.role} role in tenant ${p.tenantName}; you are ${p.role}`, {
      required: access.role,
      role: p.role,
    });
}

/**
 * - read: list, show, read files, diff — any member of the tenant (viewer and up);
 * - operate: exec, write files, suspend, resume — the owner (member and up) or a maintainer;
 * - delete: the owner (member and up) or a maintainer.
 * An agent token reaches only its own workshop, for reading and operating, never deleting.
 */
export type WorkshopAction = 'read' | 'operate' | 'delete';

export interface OwnedResource {
  id: string;
  tenantId: string;
  ownerId: string | null;
}

export function checkWorkshopAccess(p: Principal, ws: OwnedResource, action: WorkshopAction): void {
  // Another tenant's workshops do not exist for this caller (no existence leak).
  const hidden = ws.tenantId !== p.tenantId || (p.kind === 'agent' && ws.id !== p.workshopId);
  if (hidden)
    throw new AtelierError(
      'WORKSHOP_NOT_FOUND',
      `workshop ${ws.id} does not exist (or was deleted): run \`atelier workshops list\` to see yours`,
      {
        id: ws.id,
      },
    );
  if (p.kind === 'agent') {
    if (action === 'delete') throw new AtelierError('PERMISSION_DENIED', 'an agent token cannot delete its workshop');
    if (action === 'operate' && !atLeast(p.role, 'member'))
      throw new AtelierError('PERMISSION_DENIED', `this agent token is ${p.role}: it can only read its workshop`, { id: ws.id });
    return;
  }
  if (action === 'read') return;
  if (atLeast(p.role, 'maintainer')) return;
  if (atLeast(p.role, 'member') && ws.ownerId === p.userId) return;
  throw new AtelierError(
    'PERMISSION_DENIED',
    atLeast(p.role, 'member')
      ? `workshop ${ws.id} belongs to someone else: only its owner or a maintainer may ${action === 'delete' ? 'delete' : 'operate'} it`
      : `the ${p.role} role can only read workshops`,
    { id: ws.id },
  );
}
