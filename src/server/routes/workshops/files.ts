import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AtelierError } from '../../../core/index.js';
import type { WorkshopService } from '../../../workshops/index.js';
import { principalOf } from '../common.js';
import { queryOf } from '../query.js';
import { OPERATE, READ, type IdParams } from './access.js';

/** `?path=` given once, as a string (a repeated parameter arrives as an array). */
function pathParam(query: unknown): string {
  const q = queryOf(query);
  const path = q.requiredString('path');
  q.done();
  return path;
}

/** Read and write a file of the workspace. */
export function fileRoutes(app: FastifyInstance, service: WorkshopService): void {
  app.get<IdParams>('/v1/workshops/:id/files', { config: { access: READ } }, async (request, reply) => {
    const path = pathParam(request.query);
    const data = await service.readFile(request.params.id, path, principalOf(request));
    return reply.header('content-type', 'application/octet-stream').send(data);
  });

  app.put<IdParams>(
    '/v1/workshops/:id/files',
    { bodyLimit: 16 << 20, config: { access: OPERATE } },
    async (request: FastifyRequest<IdParams>) => {
      const path = pathParam(request.query);
      const body = request.body;
      const data = Buffer.isBuffer(body)
        ? body
        : typeof body === 'string'
          ? Buffer.from(body)
          : body === undefined
            ? Buffer.alloc(0)
            : null;
      if (!data) throw new AtelierError('INVALID_ARGUMENT', 'send the file content as application/octet-stream', { field: 'body' });
      return service.writeFile(request.params.id, path, data, principalOf(request));
    },
  );
}

/** The workspace's changes against HEAD. */
export function gitRoutes(app: FastifyInstance, service: WorkshopService): void {
  app.get<IdParams>('/v1/workshops/:id/git/diff', { config: { access: READ } }, async (request) =>
    service.gitDiff(request.params.id, principalOf(request)),
  );
}
