import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AtelierError } from '../core/index.js';
import { asDatabaseError } from '../db/index.js';

/** The single error handler: `{ code, message, details, requestId }`, never a stack trace. */
export function errorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  let err = asDatabaseError(error);
  if (!(err instanceof AtelierError)) {
    const fe = error as FastifyError;
    if (fe.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      err = new AtelierError('PAYLOAD_TOO_LARGE', 'request body is too large', { limitBytes: request.routeOptions.bodyLimit });
    } else if (fe.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      err = new AtelierError(
        'INVALID_ARGUMENT',
        `content-type ${request.headers['content-type'] ?? '(none)'} is not accepted here: send application/json`,
      );
    } else if (typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
      err = new AtelierError('INVALID_ARGUMENT', `bad request: ${fe.message}`);
    } else {
      request.log.error({ err: error }, 'unhandled error');
      err = new AtelierError('INTERNAL', 'internal error: the server log has the details under this request id');
    }
  }
  const e = err as AtelierError;
  if (e.code === 'DATABASE_UNAVAILABLE') request.log.warn({ err: (e.cause as Error | undefined)?.message }, 'database unavailable');
  if (e.code === 'SANDBOX_FAILED') request.log.error({ err: e.message }, 'sandbox failure');
  void reply
    .status(e.status)
    .header('retry-after', e.status === 503 ? '2' : undefined)
    .send(e.toBody(String(request.id)));
}
