import type { FastifyInstance } from 'fastify';
import { SimulatorRequest } from '../../core/index.js';
import type { RouteAccess } from '../../identity/index.js';
import type { WorkshopService } from '../../workshops/index.js';
import { parse, principalOf } from './common.js';
import { queryOf } from './query.js';

// Route-level rules; the per-workshop rule (tenant, owner, agent's own workshop) is the service's.
// An agent asks for simulators for its own workshop (request_simulator).
const READ: RouteAccess = { role: 'viewer', agent: true };
const OPERATE: RouteAccess = { role: 'member', agent: true };

type Params = { Params: { id: string; name: string } };

/** `?tail=` bytes of log, once, 1 B – 1 MiB. */
function tailParam(query: unknown): number | undefined {
  const q = queryOf(query);
  const tail = q.int('tail', { min: 1, max: 1 << 20 });
  q.done();
  return tail;
}

/** A workshop's simulators: list, live request, logs, reset, stop. */
export function simulatorRoutes(app: FastifyInstance, service: WorkshopService): void {
  app.get<{ Params: { id: string } }>('/v1/workshops/:id/simulators', { config: { access: READ } }, async (request) => ({
    items: await service.listSimulators(request.params.id, principalOf(request)),
  }));

  app.post<{ Params: { id: string } }>('/v1/workshops/:id/simulators', { config: { access: OPERATE } }, async (request, reply) => {
    const body = parse(SimulatorRequest, request.body);
    const view = await service.requestSimulator(request.params.id, body, principalOf(request));
    return reply.status(201).send(view);
  });

  app.get<Params>('/v1/workshops/:id/simulators/:name/logs', { config: { access: READ } }, async (request, reply) => {
    const text = await service.simulatorLogs(request.params.id, request.params.name, principalOf(request), tailParam(request.query));
    return reply.type('text/plain; charset=utf-8').send(text);
  });

  app.post<Params>('/v1/workshops/:id/simulators/:name/reset', { config: { access: OPERATE } }, async (request) =>
    service.resetSimulator(request.params.id, request.params.name, principalOf(request)),
  );

  app.post<Params>('/v1/workshops/:id/simulators/:name/stop', { config: { access: OPERATE } }, async (request) =>
    service.stopSimulator(request.params.id, request.params.name, principalOf(request)),
  );
}
