import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { AtelierError, newRequestId } from '../core/index.js';
import type { Pool } from '../db/index.js';
import type { WorkshopService } from '../workshops/index.js';
import { authenticate } from './auth.js';
import { errorHandler } from './errors.js';
import { workshopRoutes } from './routes/workshops.js';

const PUBLIC_ROUTES = new Set(['/healthz', '/metrics']);

export interface AppDeps {
  pool: Pool;
  workshops: WorkshopService;
  logger: FastifyBaseLogger;
  version: string;
}

/** Builds the HTTP server: health, metrics, and the authenticated /v1 API. */
export function buildApp(deps: AppDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger,
    genReqId: () => newRequestId(),
    requestIdHeader: false,
    bodyLimit: 1 << 20,
    forceCloseConnections: true,
  });

  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'atelier_' });
  const requests = new Counter({
    name: 'atelier_http_requests_total',
    help: 'HTTP requests by route and status',
    labelNames: ['method', 'route', 'status'],
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'atelier_http_request_duration_seconds',
    help: 'HTTP request duration',
    labelNames: ['method', 'route'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [registry],
  });
  new Gauge({
    name: 'atelier_workshops',
    help: 'Workshops on this server by status',
    labelNames: ['status'],
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const r = await deps.pool.query<{ status: string; n: string }>('SELECT status, count(*) AS n FROM workshops GROUP BY status');
        for (const row of r.rows) this.set({ status: row.status }, Number(row.n));
      } catch {
        // database down: /healthz says so
      }
    },
  });

  app.addHook('onRequest', async (request, reply) => {
    void reply.header('x-request-id', String(request.id));
    // Decided on the route the router matched, never on the raw URL (percent-encoding, absolute
    // form): every route is authenticated except the public ones; unknown URLs get a 404.
    const route = request.routeOptions.url;
    if (route !== undefined && !PUBLIC_ROUTES.has(route)) request.principal = await authenticate(deps.pool, request);
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unknown';
    requests.inc({ method: request.method, route, status: String(reply.statusCode) });
    duration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  });

  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request) => {
    throw new AtelierError('NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}: see the README's API section`);
  });

  app.get('/healthz', async (_request, reply) => {
    try {
      await deps.pool.query('SELECT 1');
    } catch {
      return reply.status(503).send({ status: 'unavailable', code: 'DATABASE_UNAVAILABLE', version: deps.version });
    }
    return { status: 'ok', version: deps.version };
  });
  app.get('/metrics', async (_request, reply) => reply.header('content-type', registry.contentType).send(await registry.metrics()));

  workshopRoutes(app, deps.workshops);
  return app;
}
