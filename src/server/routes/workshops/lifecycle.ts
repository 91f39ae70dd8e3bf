import type { FastifyInstance } from 'fastify';
import { CreateWorkshopRequest } from '../../../core/index.js';
import type { WorkshopService } from '../../../workshops/index.js';
import { parse, principalOf } from '../common.js';
import { MEMBER, OPERATE, READ, type IdParams } from './access.js';

/** Create, list, get, delete, stop and resume. */
export function lifecycleRoutes(app: FastifyInstance, service: WorkshopService): void {
  app.post('/v1/workshops', { config: { access: MEMBER } }, async (request, reply) => {
    const body = parse(CreateWorkshopRequest, request.body);
    const ws = await service.create(body, principalOf(request));
    return reply.status(201).send(ws);
  });

  app.get('/v1/workshops', { config: { access: READ } }, async (request) => ({ items: await service.list(principalOf(request)) }));

  app.get<IdParams>('/v1/workshops/:id', { config: { access: READ } }, async (request) =>
    service.get(request.params.id, principalOf(request)),
  );

  app.delete<IdParams>('/v1/workshops/:id', { config: { access: MEMBER } }, async (request) => {
    await service.delete(request.params.id, principalOf(request));
    return { id: request.params.id, deleted: true };
  });

  app.post<IdParams>('/v1/workshops/:id/stop', { config: { access: OPERATE } }, async (request) =>
    service.stop(request.params.id, principalOf(request)),
  );
  app.post<IdParams>('/v1/workshops/:id/resume', { config: { access: OPERATE } }, async (request) =>
    service.resume(request.params.id, principalOf(request)),
  );
}
