import type { FastifyInstance } from 'fastify';
import type { WorkshopService } from '../../../workshops/index.js';
import { principalOf } from '../common.js';
import { READ, type IdParams } from './access.js';

/**
 * What a workshop uses now. Answered by the node that runs it (every `/v1/workshops/:id/…`
 * request is relayed there): its cgroups are on that host only. Not published with the
 * heartbeat like the disk: memory and CPU change every second, and a reader wants them now.
 */
export function usageRoutes(app: FastifyInstance, service: WorkshopService): void {
  app.get<IdParams>('/v1/workshops/:id/usage', { config: { access: READ } }, async (request) =>
    service.usage(request.params.id, principalOf(request)),
  );
}
