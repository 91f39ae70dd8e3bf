import type { FastifyInstance } from 'fastify';
import { AtelierError } from '../../core/index.js';
import type { RouteAccess } from '../../identity/index.js';
import { MAX_EXEC_WAIT_SECONDS, StartExecRequest, type ExecLog } from '../../workshops/index.js';
import { parse, principalOf } from './common.js';

// Same rule as exec: its output may hold what only an operator of the workshop should see.
const OPERATE: RouteAccess = { role: 'member', agent: true };

/** An optional number query parameter, given once, within bounds. */
function numParam(value: unknown, name: string, max: number, integer: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = typeof value === 'string' && (integer ? /^\d{1,16}$/ : /^\d{1,16}(\.\d{1,3})?$/).test(value) ? Number(value) : NaN;
  if (!Number.isFinite(n) || n < 0 || n > max)
    throw new AtelierError('INVALID_ARGUMENT', `query parameter ${name} must be a number from 0 to ${max}, given once`, { field: name });
  return n;
}

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

  app.get<{ Params: { execId: string }; Querystring: { after?: unknown; wait?: unknown } }>(
    '/v1/execs/:execId',
    { config: { access: OPERATE } },
    async (request) => {
      const after = numParam(request.query.after, 'after', Number.MAX_SAFE_INTEGER, true) ?? 0;
      const wait = numParam(request.query.wait, 'wait', MAX_EXEC_WAIT_SECONDS, false) ?? 0;
      return execs.read(request.params.execId, principalOf(request), after, wait);
    },
  );
}
