import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { AtelierError } from '../../../core/index.js';
import type { WorkshopService } from '../../../workshops/index.js';
import { principalOf } from '../common.js';
import { queryOf } from '../query.js';
import { READ, type IdParams } from './access.js';

const FOLLOW_POLL_MS = 250;
const FOLLOW_MAX_MS = 60_000;
/**
 * A follower hears at least this often: a blank line (NDJSON readers skip them; the CLI's and the
 * dashboard's do) when no decision was sent meanwhile, so a client can tell a quiet workshop from
 * a connection that died silently (the dashboard gives up on one after three missed beats), and
 * a dead client is noticed here by the failed write. One is also sent at once, which flushes the
 * answer's headers: the client knows the stream is open before the first decision.
 */
const FOLLOW_HEARTBEAT_MS = 5_000;

/** The workshop's egress decisions: a page, or (`follow`) a stream of them as they are recorded. */
export function egressRoutes(app: FastifyInstance, service: WorkshopService): void {
  app.get<IdParams>('/v1/workshops/:id/egress', { config: { access: READ } }, async (request, reply) => {
    const actor = principalOf(request);
    const id = request.params.id;
    const q = queryOf(request.query);
    const after = q.int('after', { min: 0, max: Number.MAX_SAFE_INTEGER });
    const limit = q.int('limit', { min: 1, max: 1000 }) ?? 100;
    const follow = q.boolean('follow') ?? false;
    q.done();
    // Watched from the start: a client gone during the first query stops everything.
    let stopped = false;
    reply.raw.on('close', () => (stopped = true));
    const first = await service.egressLog(id, actor, { ...(after !== undefined ? { afterId: after } : {}), limit });
    if (!follow) return { items: first };
    if (stopped || request.raw.destroyed) return reply.hijack();
    // NDJSON: what there is, then each new decision as it is recorded. A stream lasts at most
    // FOLLOW_MAX_MS (and never past the token's expiry): the CLI reconnects with `after`, which
    // authenticates again, so a revoked or expired token stops a follower within a minute.
    const stream = new PassThrough();
    const stop = (): void => {
      stopped = true;
      stream.end();
    };
    reply.raw.on('close', stop);
    const tokenEnds = actor.expiresAt ? Date.parse(actor.expiresAt) : Infinity;
    const ends = Math.min(Date.now() + FOLLOW_MAX_MS, tokenEnds);
    let last = first.at(-1)?.id ?? after ?? 0;
    let wrote = Date.now();
    stream.write('\n');
    const send = async (items: { id: number }[]): Promise<void> => {
      if (items.length > 0) wrote = Date.now();
      for (const d of items) {
        // Backpressure: a client that does not read is not buffered for without limit.
        if (!stream.write(`${JSON.stringify(d)}\n`)) await new Promise((r) => stream.once('drain', r).once('close', r));
        if (stopped) return;
      }
    };
    const tick = async (): Promise<void> => {
      await send(first);
      while (!stopped && Date.now() < ends) {
        await new Promise((r) => setTimeout(r, FOLLOW_POLL_MS));
        if (stopped) return;
        if (Date.now() - wrote >= FOLLOW_HEARTBEAT_MS) {
          wrote = Date.now();
          stream.write('\n');
        }
        try {
          const next = await service.egressLog(id, actor, { afterId: last, limit: 500 });
          await send(next);
          last = next.at(-1)?.id ?? last;
        } catch (err) {
          if (err instanceof AtelierError && err.code === 'DATABASE_UNAVAILABLE') continue;
          break;
        }
      }
      stop();
    };
    void tick();
    return reply.header('content-type', 'application/x-ndjson').header('cache-control', 'no-store').send(stream);
  });
}
