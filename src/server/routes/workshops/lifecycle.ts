import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { AtelierError, CreateWorkshopRequest, type CreateWorkshopFrame } from '../../../core/index.js';
import type { WorkshopService } from '../../../workshops/index.js';
import { parse, principalOf } from '../common.js';
import type { Cluster } from '../../relay.js';
import { MEMBER, OPERATE, READ, type IdParams } from './access.js';

/** Create, list, get, delete, stop and resume. */
export function lifecycleRoutes(app: FastifyInstance, service: WorkshopService, cluster?: Cluster): void {
  app.post('/v1/workshops', { config: { access: MEMBER } }, async (request, reply) => {
    const body = parse(CreateWorkshopRequest, request.body);
    // Placed by the node that took the request (docs/replicas.md); a relayed create is made here.
    let placement = request.relayed?.placement;
    if (cluster && !request.relayed) {
      const place = await cluster.nodes.place(body.node);
      if (place.id !== cluster.nodeId) {
        await cluster.forward(request, reply, place.id, principalOf(request), {
          what: 'the new workshop',
          placement: `${place.reason}; placed by node ${cluster.nodes.name}`,
          body: Buffer.from(JSON.stringify(body)),
        });
        return reply;
      }
      placement = place.reason;
    }
    if (!(request.headers.accept ?? '').includes('application/x-ndjson')) {
      const ws = await service.create(body, principalOf(request), undefined, placement);
      return reply.status(201).send(ws);
    }
    // NDJSON: the phases as they happen, then the workshop. The stream opens with the first
    // phase, so that a request refused before anything exists is still a plain 4xx.
    let stream: PassThrough | undefined;
    const write = (frame: CreateWorkshopFrame): void => {
      if (!stream) {
        stream = new PassThrough();
        // A client gone mid-create: the workshop is made all the same, its frames are dropped.
        stream.on('error', () => undefined);
        void reply.status(201).header('content-type', 'application/x-ndjson').header('cache-control', 'no-store').send(stream);
      }
      if (!stream.destroyed && !stream.writableEnded) stream.write(`${JSON.stringify(frame)}\n`);
    };
    try {
      const ws = await service.create(body, principalOf(request), write, placement);
      write({ workshop: ws });
    } catch (err) {
      if (!stream) throw err;
      request.log.error({ err }, 'workshop create failed after its phases were streamed');
      const e = err instanceof AtelierError ? err : new AtelierError('INTERNAL', 'the workshop could not be created: see the server log');
      write({ error: { code: e.code, message: e.message } });
    }
    stream!.end();
    return reply;
  });

  // Read from the database wherever the request lands, the disk too: each node publishes its
  // workshops' figures with its heartbeat (docs/replicas.md).
  app.get('/v1/workshops', { config: { access: READ } }, async (request) => ({ items: await service.list(principalOf(request)) }));

  app.get<IdParams>('/v1/workshops/:id', { config: { access: READ } }, async (request) => {
    let w = await service.get(request.params.id, principalOf(request));
    // Its node silent: maybe removed (or back) since this node last read the nodes; say what is true now.
    if (cluster && w.status === 'NodeUnreachable') {
      await cluster.nodes.refresh();
      w = await service.get(request.params.id, principalOf(request));
    }
    return w;
  });

  app.delete<IdParams>('/v1/workshops/:id', { config: { access: MEMBER } }, async (request) => {
    // A workshop of a node removed from the installation: its record goes (its files were there).
    const owner = cluster && !request.relayed ? await service.nodeOf(request.params.id) : undefined;
    if (owner !== undefined && owner !== cluster!.nodeId && cluster!.nodes.isRemoved(owner)) {
      await service.forget(request.params.id, principalOf(request));
      return { id: request.params.id, deleted: true };
    }
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
