import type { FastifyInstance } from 'fastify';
import type { RouteAccess } from '../../identity/index.js';
import type { NodeRegistry } from '../nodes.js';
import { principalOf } from './common.js';

// Server-wide: the default tenant's admins (as `atelier server status`).
const SERVER_ADMIN: RouteAccess = { role: 'admin', platform: true };

type NameParams = { Params: { name: string } };

/** `atelier nodes list|drain|undrain|remove` (docs/replicas.md). */
export function nodeRoutes(app: FastifyInstance, nodes: NodeRegistry): void {
  app.get('/v1/nodes', { config: { access: SERVER_ADMIN } }, async () => ({ items: await nodes.list() }));
  app.post<NameParams>('/v1/nodes/:name/drain', { config: { access: SERVER_ADMIN } }, async (request) =>
    nodes.setDraining(request.params.name, true),
  );
  app.post<NameParams>('/v1/nodes/:name/undrain', { config: { access: SERVER_ADMIN } }, async (request) =>
    nodes.setDraining(request.params.name, false),
  );
  app.delete<NameParams>('/v1/nodes/:name', { config: { access: SERVER_ADMIN } }, async (request) =>
    nodes.remove(request.params.name, principalOf(request).userName),
  );
}
