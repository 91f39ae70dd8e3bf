import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AtelierError, ExecRequest, type ExecFrame } from '../../../core/index.js';
import type { WorkshopService } from '../../../workshops/index.js';
import type { ApprovalEvent, ApprovalService } from '../../../approvals/index.js';
import { approvalWhat, parse, principalOf } from '../common.js';
import { OPERATE, type IdParams } from './access.js';

const MAX_BUFFERED = 16 << 20;

type ExecRun = Awaited<ReturnType<WorkshopService['exec']>>;

/**
 * Run a command: one JSON answer once it ends (`accept: application/json`), or NDJSON frames of its
 * output as it runs.
 */
export function execRoutes(app: FastifyInstance, service: WorkshopService, approvals?: ApprovalService): void {
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
    let run: ExecRun;
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
    stopWithClient(request, reply, run);
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
    streamFrames(stream, run, request.params.id, announced, approvals);
    if (early) return reply;
    return reply.header('content-type', 'application/x-ndjson').header('cache-control', 'no-store').send(stream);
  });
}

/**
 * The connection closed before the answer was complete: do not leave its command running, nor its
 * output paused forever behind a stream nobody reads.
 */
function stopWithClient(request: FastifyRequest, reply: FastifyReply, run: ExecRun): void {
  reply.raw.on('close', () => {
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
}

/** The command's output, the approvals its workshop waits for, then its end, as NDJSON frames. */
function streamFrames(stream: PassThrough, run: ExecRun, workshopId: string, announced: Set<string>, approvals?: ApprovalService): void {
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
    if (event.type !== 'created' || a.workshopId !== workshopId || announced.has(a.id)) return;
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
}
