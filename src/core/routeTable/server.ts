// The route table's server routes (routes.ts puts the areas together).
import { z } from 'zod';
import { Health, itemsOf, RouteCatalog, ServerStatus, NodeRemoval, NodeView } from '../api.js';
import { ok } from './shared.js';
import type { RouteDef } from '../routes.js';

export const serverRoutes = {
  health: {
    method: 'GET',
    path: '/healthz',
    summary: 'whether the server and its database answer (503 when the database does not)',
    tag: 'server',
    auth: 'public',
    response: Health,
  },
  openapi: {
    method: 'GET',
    path: '/v1/openapi.json',
    summary: 'this API as an OpenAPI 3.1 document',
    tag: 'server',
    auth: 'public',
    response: z.looseObject({ openapi: z.string() }),
  },
  listRoutes: {
    method: 'GET',
    path: '/v1/admin/routes',
    summary: 'every route the server serves, with its access rule (admins)',
    tag: 'server',
    auth: 'bearer',
    response: RouteCatalog,
  },
  serverStatus: {
    method: 'GET',
    path: '/v1/admin/status',
    summary: 'the running server: version, uptime, database, disk, workshops by state, simulators, last errors (server admins)',
    tag: 'server',
    auth: 'bearer',
    response: ServerStatus,
  },
  listNodes: {
    method: 'GET',
    path: '/v1/nodes',
    summary: 'the nodes of the installation (every server on this PostgreSQL): address, version, load, last heartbeat, state',
    tag: 'server',
    auth: 'bearer',
    response: itemsOf(NodeView),
  },
  drainNode: {
    method: 'POST',
    path: '/v1/nodes/:name/drain',
    summary: 'no new workshops on this node (those it runs stay); server admins',
    tag: 'server',
    auth: 'bearer',
    response: NodeView,
  },
  undrainNode: {
    method: 'POST',
    path: '/v1/nodes/:name/undrain',
    summary: 'the node takes new workshops again; server admins',
    tag: 'server',
    auth: 'bearer',
    response: NodeView,
  },
  removeNode: {
    method: 'DELETE',
    path: '/v1/nodes/:name',
    summary:
      'take a dead node out of the installation (refused for a live one); its workshops stay, NodeUnreachable, deletable; server admins',
    tag: 'server',
    auth: 'bearer',
    response: NodeRemoval,
  },
  rotateSigningKeys: {
    method: 'POST',
    path: '/v1/admin/signing-keys/rotate',
    summary: "rotate the embedded issuer's signing key (server admins); nobody is logged out",
    tag: 'identity',
    auth: 'bearer',
    response: ok({ kid: z.string() }),
  },
} as const satisfies Record<string, RouteDef>;
