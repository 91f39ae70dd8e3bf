import { WebSocket, type RawData } from 'ws';
import { AtelierError, type TerminalEvent } from '../core/index.js';
import { freshBearer, readBody, serverError, type Target } from './client.js';

/** Messages of a terminal or tunnel WebSocket, as the CLI sees them. */
export interface TerminalSocket {
  ws: WebSocket;
  /** The first control event (started, connected) or the server's refusal, already thrown. */
  first: TerminalEvent;
  /** Takes over the messages after the first one (those that came meanwhile first, in order). */
  listen(fn: (data: RawData, isBinary: boolean) => void): void;
}

export function asBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/** Parses a server control frame; anything else is a protocol error. */
export function parseEvent(data: RawData): TerminalEvent {
  try {
    return JSON.parse(asBuffer(data).toString('utf8')) as TerminalEvent;
  } catch {
    throw new AtelierError('INTERNAL', 'the server sent a control message that is not JSON');
  }
}

export function eventError(e: Extract<TerminalEvent, { type: 'error' }>): AtelierError {
  const code = e.code as ConstructorParameters<typeof AtelierError>[0];
  return new AtelierError(code, e.message);
}

function unreachable(target: Target, err: NodeJS.ErrnoException): AtelierError {
  if (err.code === 'ECONNREFUSED' || err.code === 'ENOTFOUND' || err.code === 'EHOSTUNREACH' || err.code === 'ECONNRESET')
    return new AtelierError(
      'UNAVAILABLE',
      `cannot reach the Atelier server at ${target.url} (context ${target.context}): is it running? Start it with \`atelier server start\``,
    );
  return new AtelierError('UNAVAILABLE', `connection to ${target.url} failed: ${err.message}`);
}

/**
 * Opens a terminal or tunnel WebSocket (`path` under the server URL) with the context's token,
 * and waits for the server's first control event. A refusal before the upgrade (401, 404,
 * PORT_CLOSED…) is thrown as the server's AtelierError.
 */
export async function openTerminalSocket(target: Target, path: string, opts: { start?: unknown } = {}): Promise<TerminalSocket> {
  const url = new URL(path, target.url);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  const headers: Record<string, string> = {};
  const bearer = await freshBearer(target);
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (target.tenant) headers['x-atelier-tenant'] = target.tenant;
  const ws = new WebSocket(url, { headers, perMessageDeflate: false, maxPayload: 16 << 20 });
  return new Promise<TerminalSocket>((resolve, reject) => {
    let done = false;
    const fail = (err: Error): void => {
      if (done) return;
      done = true;
      ws.terminate();
      reject(err);
    };
    ws.once('unexpected-response', (_req, res) => {
      void readBody(res).then(
        (body) => fail(serverError(target, res.statusCode ?? 500, body.toString('utf8'))),
        (err: Error) => fail(err),
      );
    });
    ws.once('error', (err: NodeJS.ErrnoException) => fail(unreachable(target, err)));
    ws.once('open', () => {
      if (opts.start !== undefined) ws.send(JSON.stringify(opts.start));
    });
    ws.once('message', (data, isBinary) => {
      if (done) return;
      if (isBinary) return fail(new AtelierError('INTERNAL', 'the server sent data before saying the connection is up'));
      let event: TerminalEvent;
      try {
        event = parseEvent(data);
      } catch (err) {
        return fail(err as Error);
      }
      if (event.type === 'error') return fail(eventError(event));
      done = true;
      // Data may follow the first event in the same packet, before the caller has its listener:
      // it waits here, in order, until the caller takes over.
      const queued: [RawData, boolean][] = [];
      const queue = (d: RawData, b: boolean): void => void queued.push([d, b]);
      ws.on('message', queue);
      resolve({
        ws,
        first: event,
        listen(fn) {
          ws.off('message', queue);
          for (const [d, b] of queued.splice(0)) fn(d, b);
          ws.on('message', fn);
        },
      });
    });
    ws.once('close', () => fail(new AtelierError('UNAVAILABLE', 'the server closed the connection before it was up')));
  });
}

/** Tells the user on stderr that the workshop was resumed for this command. */
export function sayResumed(id: string, event: TerminalEvent | boolean): void {
  const resumed = typeof event === 'boolean' ? event : (event.type === 'started' || event.type === 'connected') && event.resumed;
  if (resumed) process.stderr.write(`atelier: workshop ${id} was suspended: resumed it (use --no-resume to refuse)\n`);
}
