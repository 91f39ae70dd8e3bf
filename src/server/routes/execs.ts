import type { FastifyInstance } from 'fastify';
import type { RouteAccess } from '../../identity/index.js';
import { MAX_EXEC_WAIT_SECONDS, StartExecRequest, type ExecLog } from '../../workshops/index.js';
import { parse, principalOf } from './common.js';
import { queryOf } from './query.js';

// Same rule as exec: its output may hold what only an operator of the workshop should see.
const OPERATE: RouteAccess = { role: 'member', agent: true };

/** The async exec API: start a command whose output is kept, read it back by offset. */
export function execRoutes(app: FastifyInstance, execs: ExecLog): void {
  app.post<{ Params: { id: string } }>(
    '/v1/workshops/:id/execs',
    { bodyLimit: 100 << 20, config: { access: OPERATE } },
    async (request, reply) => {
      const body = parse(StartExecRequest, request.body);
      const view = await execs.start(request.params.id, body, principalOf(request));
      return reply.status(201).send(view);
    },
  );

  app.get<{ Params: { execId: string } }>('/v1/execs/:execId', { config: { access: OPERATE } }, async (request) => {
    const q = queryOf(request.query);
    const after = q.int('after', { min: 0, max: Number.MAX_SAFE_INTEGER }) ?? 0;
    const wait = q.number('wait', { min: 0, max: MAX_EXEC_WAIT_SECONDS }) ?? 0;
    q.done();
    return execs.read(request.params.execId, principalOf(request), after, wait);
  });
}
