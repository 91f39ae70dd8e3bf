import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { AtelierError, TUNNEL_PROTOCOL, TUNNEL_RESUMED_HEADER, TunnelStream } from '../../../core/index.js';
import { freshBearer, readBody, serverError, type Target } from '../../client.js';

/** An open byte tunnel to a port inside a workshop. */
export interface Tunnel {
  stream: TunnelStream;
  /** The workshop was suspended and resumed for this tunnel. */
  resumed: boolean;
}

function unreachable(target: Target, err: NodeJS.ErrnoException): AtelierError {
  if (['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ECONNRESET'].includes(err.code ?? ''))
    return new AtelierError(
      'UNAVAILABLE',
      `cannot reach the Atelier server at ${target.url} (context ${target.context}): is it running? Start it with \`atelier server start\``,
    );
  return new AtelierError('UNAVAILABLE', `connection to ${target.url} failed: ${err.message}`);
}

/**
 * Opens a byte tunnel to `port` inside the workshop: an HTTP/1.1 `Upgrade: atelier-tunnel` with
 * the context's token, answered `101` only once the remote port has answered. A refusal (401,
 * 404, PORT_CLOSED…) is thrown as the server's AtelierError.
 */
export async function openTunnel(target: Target, id: string, port: number, resume: boolean): Promise<Tunnel> {
  const url = new URL(`/v1/workshops/${encodeURIComponent(id)}/tunnel?port=${port}&resume=${resume}`, target.url);
  const headers: Record<string, string> = { connection: 'Upgrade', upgrade: TUNNEL_PROTOCOL };
  const bearer = await freshBearer(target);
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (target.tenant) headers['x-atelier-tenant'] = target.tenant;
  const lib = url.protocol === 'https:' ? https : http;
  return new Promise<Tunnel>((resolve, reject) => {
    const req = lib.request(url, { method: 'GET', headers, agent: false });
    req.once('upgrade', (res: http.IncomingMessage, socket: Socket, head: Buffer) => {
      if (String(res.headers.upgrade).toLowerCase() !== TUNNEL_PROTOCOL) {
        socket.destroy();
        return reject(new AtelierError('INTERNAL', `the server at ${target.url} answered the tunnel with another protocol`));
      }
      resolve({ stream: new TunnelStream(socket, head), resumed: res.headers[TUNNEL_RESUMED_HEADER] === 'true' });
    });
    req.once('response', (res: http.IncomingMessage) => {
      void readBody(res).then(
        (body) => reject(serverError(target, res.statusCode ?? 500, body.toString('utf8'))),
        (err: Error) => reject(unreachable(target, err)),
      );
    });
    req.once('error', (err: NodeJS.ErrnoException) => reject(unreachable(target, err)));
    req.end();
  });
}

/**
 * Relays a local byte stream through a tunnel with backpressure both ways (a side that does not
 * read pauses the other, nothing is buffered without limit) and half-close carried as EOF.
 * Resolves when both ways have ended, or when `close()` was called on the tunnel because the local
 * side went away; rejects with the reason otherwise (an error inside the workshop, a cut tunnel).
 */
export function pipeTunnel(tunnel: TunnelStream, input: Readable, output: Writable): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    input.on('data', (chunk: Buffer) => {
      if (!tunnel.write(chunk)) input.pause();
    });
    tunnel.on('drain', () => input.resume());
    input.once('end', () => tunnel.end());
    input.on('error', () => tunnel.close());
    output.on('error', () => tunnel.close());
    tunnel.on('data', (chunk: Buffer) => {
      if (!output.write(chunk)) {
        tunnel.pause();
        output.once('drain', () => tunnel.resume());
      }
    });
    tunnel.once('end', () => output.end());
    tunnel.once('error', (err) => reject(err));
    tunnel.once('close', () => resolve());
  });
}
