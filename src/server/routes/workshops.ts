import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { AtelierError, CreateWorkshopRequest, ExecRequest, type ExecFrame } from '../../core/index.js';
import type { RouteAccess } from '../../identity/index.js';
import type { WorkshopService } from '../../workshops/index.js';
import type { ApprovalEvent, ApprovalService } from '../../approvals/index.js';
import { parse, principalOf } from './common.js';
import { queryOf } from './query.js';

/** `?path=` given once, as a string (a repeated parameter arrives as an array). */
function pathParam(query: unknown): string {
  const q = queryOf(query);
  const path = q.requiredString('path');
  q.done();
  return path;
}

type IdParams = { Params: { id: string } };

const FOLLOW_POLL_MS = 250;
const FOLLOW_MAX_MS = 60_000;

// Route-level rules; the per-workshop rule (tenant, owner, agent's own workshop) is the service's.
const READ: RouteAccess = { role: 'viewer', agent: true };
const OPERATE: RouteAccess = { role: 'member', agent: true };
const MEMBER: RouteAccess = { role: 'member' };

const MAX_BUFFERED = 16 << 20;

/** What an approval is about, in a few words (never a secret's value: requests hold only names). */
export function approvalWhat(p: Record<string, unknown>): string {
  const v = p.entry ?? p.host ?? p.name ?? p.branch ?? (Array.isArray(p.command) ? p.command.join(' ') : '');
  return String(v).slice(0, 120);
}

/** REST routes for workshops under /v1 (bearer token required; see app.ts). */
export function workshopRoutes(app: FastifyInstance, service: WorkshopService, approvals?: ApprovalService): void {
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

  app.post<IdParams>('/v1/workshops/:id/exec', { bodyLimit: 100 << 20, config: { access: OPERATE } }, async (request, reply) => {
    const body = parse(ExecRequest, request.body);
    const wantsJson = (request.headers.accept ?? '').includes('application/json') && !(request.headers.accept ?? '').includes('ndjson');
    // A command that must be approved first (atelier.yaml approvals.commands): a streaming client
    // gets an `approval` frame at once (the CLI prints what waits and how to approve it), then the
    // command's frames once approved, or an error frame.
    const gone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) gone.abort();
    });
    let early: PassThrough | undefined;
    const announced = new Set<string>();
    const onApproval = wantsJson
      ? undefined
      : (approvalId: string): void => {
          announced.add(approvalId);
          early = new PassThrough();
          early.write(`${JSON.stringify({ approval: { id: approvalId, waiting: true } } satisfies ExecFrame)}\n`);
          void reply.header('content-type', 'application/x-ndjson').header('cache-control', 'no-store').send(early);
        };
    let run: Awaited<ReturnType<WorkshopService['exec']>>;
    try {
      run = await service.exec(request.params.id, body, principalOf(request), {
        ...(onApproval ? { onApproval } : {}),
        signal: gone.signal,
      });
    } catch (err) {
      if (!early) throw err;
      const e = err instanceof AtelierError ? err : new AtelierError('INTERNAL', 'exec failed');
      early.end(`${JSON.stringify({ error: { code: e.code, message: e.message } } satisfies ExecFrame)}\n`);
      return reply;
    }
    reply.raw.on('close', () => {
      // The connection closed before the answer was complete: do not leave its command running,
      // nor its output paused forever behind a stream nobody reads.
      if (!reply.raw.writableFinished) {
        run.kill();
        run.stdout.destroy();
        run.stderr.destroy();
      }
    });
    // It may have closed already, while the body was parsed or the workshop looked up.
    if (reply.raw.destroyed || request.raw.socket.destroyed) {
      run.kill();
      run.stdout.destroy();
      run.stderr.destroy();
    }
    if (wantsJson) {
      const r = await service.collectOutput(run, { maxBytes: MAX_BUFFERED, overflow: 'drop' });
      return {
        exitCode: r.exitCode,
        signal: r.signal,
        stdout: r.stdout.toString('utf8'),
        stderr: r.stderr.toString('utf8'),
        truncated: r.truncated,
      };
    }
    const stream = early ?? new PassThrough();
    const write = (frame: ExecFrame): boolean => stream.write(`${JSON.stringify(frame)}\n`);
    const pipeOut = (source: NodeJS.ReadableStream & { pause(): void; resume(): void }, name: 'stdout' | 'stderr'): void => {
      source.on('data', (c: Buffer) => {
        // Backpressure: a slow client pauses the command's output instead of growing server memory.
        if (!write({ stream: name, data: c.toString('base64') })) {
          source.pause();
          stream.once('drain', () => source.resume());
        }
      });
    };
    pipeOut(run.stdout, 'stdout');
    pipeOut(run.stderr, 'stderr');
    // While it runs, anything the workshop asks a human for (a held egress request…) is announced
    // to this terminal in one frame.
    const onEvent = ({ event }: { event: ApprovalEvent }): void => {
      const a = event.approval;
      if (event.type !== 'created' || a.workshopId !== request.params.id || announced.has(a.id)) return;
      announced.add(a.id);
      write({ approval: { id: a.id, waiting: true, category: a.category, what: approvalWhat(a.payload) } });
    };
    approvals?.events.on('event', onEvent);
    stream.once('close', () => approvals?.events.off('event', onEvent));
    stream.once('finish', () => approvals?.events.off('event', onEvent));
    run.done.then(
      ({ exitCode, signal }) => {
        write({ exitCode, signal });
        stream.end();
      },
      (err: unknown) => {
        const e = err instanceof AtelierError ? err : new AtelierError('INTERNAL', 'exec failed');
        write({ error: { code: e.code, message: e.message } });
        stream.end();
      },
    );
    if (early) return reply;
    return reply.header('content-type', 'application/x-ndjson').header('cache-control', 'no-store').send(stream);
  });

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
    const send = async (items: { id: number }[]): Promise<void> => {
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

  app.get<IdParams>('/v1/workshops/:id/git/diff', { config: { access: READ } }, async (request) =>
    service.gitDiff(request.params.id, principalOf(request)),
  );
}
