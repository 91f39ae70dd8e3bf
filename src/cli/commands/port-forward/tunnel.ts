import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import {
  AtelierError,
  TUNNEL_CUT_MESSAGE,
  TUNNEL_ID_HEADER,
  TUNNEL_MODE_HEADER,
  TUNNEL_MODE_RAW,
  TUNNEL_PROTOCOL,
  TUNNEL_RESUMED_HEADER,
  isErrorCode,
  type TunnelOutcome,
} from '../../../core/index.js';
import { resetSocket } from '../../../relay/index.js';
import { call, freshBearer, readBody, serverError, type Target } from '../../client.js';

/** An open raw byte tunnel to a port inside a workshop. */
export interface Tunnel {
  /** The upgraded connection: from now on, the bytes of the connection inside the workshop. */
  socket: Socket;
  /** Bytes the server sent right behind its 101 (they come before anything read from `socket`). */
  head: Buffer;
  /** The server's name for the tunnel (to ask why it ended). */
  id: string;
  workshop: string;
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
 * Opens a raw byte tunnel to `port` inside the workshop: an HTTP/1.1 `Upgrade: atelier-tunnel`
 * with the context's token and `Atelier-Tunnel-Mode: raw`, answered `101` only once the remote
 * port has answered. A refusal (401, 404, PORT_CLOSED…) is thrown as the server's AtelierError.
 */
export async function openTunnel(target: Target, id: string, port: number, resume: boolean): Promise<Tunnel> {
  const url = new URL(`/v1/workshops/${encodeURIComponent(id)}/tunnel?port=${port}&resume=${resume}`, target.url);
  const headers: Record<string, string> = { connection: 'Upgrade', upgrade: TUNNEL_PROTOCOL, [TUNNEL_MODE_HEADER]: TUNNEL_MODE_RAW };
  const bearer = await freshBearer(target);
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  if (target.tenant) headers['x-atelier-tenant'] = target.tenant;
  const lib = url.protocol === 'https:' ? https : http;
  return new Promise<Tunnel>((resolve, reject) => {
    const req = lib.request(url, { method: 'GET', headers, agent: false });
    req.once('upgrade', (res: http.IncomingMessage, socket: Socket, head: Buffer) => {
      const tunnelId = res.headers[TUNNEL_ID_HEADER];
      if (
        String(res.headers.upgrade).toLowerCase() !== TUNNEL_PROTOCOL ||
        String(res.headers[TUNNEL_MODE_HEADER]).toLowerCase() !== TUNNEL_MODE_RAW ||
        typeof tunnelId !== 'string'
      ) {
        socket.destroy();
        return reject(
          new AtelierError(
            'INTERNAL',
            `the server at ${target.url} answered the tunnel with another protocol (an older server? update it)`,
          ),
        );
      }
      socket.allowHalfOpen = true;
      socket.setNoDelay(true);
      // Nothing is read until the relay takes the socket.
      socket.pause();
      resolve({ socket, head, id: tunnelId, workshop: id, resumed: res.headers[TUNNEL_RESUMED_HEADER] === 'true' });
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
 * Why a tunnel that was reset ended, as an AtelierError saying it: the server's record (a reset
 * inside the workshop, the workshop deleted…), or "the tunnel was cut" when the server cannot be
 * reached or has no record of it (it restarted).
 */
export async function tunnelFailure(target: Target, tunnel: Tunnel): Promise<AtelierError> {
  try {
    const o = await call<TunnelOutcome>(target, {
      method: 'GET',
      path: `/v1/workshops/${encodeURIComponent(tunnel.workshop)}/tunnels/${encodeURIComponent(tunnel.id)}`,
    });
    if (o.state === 'reset' || o.state === 'cut')
      return new AtelierError(o.code && isErrorCode(o.code) ? o.code : 'UNAVAILABLE', o.message);
    return new AtelierError('UNAVAILABLE', TUNNEL_CUT_MESSAGE);
  } catch (err) {
    if (err instanceof AtelierError && err.code === 'WORKSHOP_NOT_FOUND')
      return new AtelierError('WORKSHOP_NOT_FOUND', `workshop ${tunnel.workshop} was deleted`);
    return new AtelierError('UNAVAILABLE', TUNNEL_CUT_MESSAGE);
  }
}

/**
 * Relays standard input and output through a tunnel (`--stdio`): backpressure both ways,
 * half-close both ways (stdin's end is the tunnel's FIN, the tunnel's FIN ends stdout).
 * Resolves when both ways have ended; a reset tunnel rejects with the reason the server gives.
 */
export function pipeStdio(target: Target, tunnel: Tunnel, input: Readable, output: Writable): Promise<void> {
  const { socket } = tunnel;
  return new Promise<void>((resolve, reject) => {
    let inEnded = false;
    let outEnded = false;
    let failed = false;
    let gone = false;
    const finish = (): void => {
      if (inEnded && outEnded && !failed) {
        socket.destroy();
        resolve();
      }
    };
    const fail = (): void => {
      if (failed || gone) return;
      failed = true;
      input.pause();
      resetSocket(socket);
      void tunnelFailure(target, tunnel).then(reject);
    };
    input.on('data', (chunk: Buffer) => {
      if (!socket.write(chunk)) {
        input.pause();
        socket.once('drain', () => input.resume());
      }
    });
    input.once('end', () => {
      inEnded = true;
      socket.end();
      finish();
    });
    // Standard input or output failing is this side going away: the tunnel is reset, nothing to report.
    const leave = (): void => {
      gone = true;
      resetSocket(socket);
      resolve();
    };
    input.on('error', leave);
    output.on('error', leave);
    if (tunnel.head.length > 0) output.write(tunnel.head);
    socket.on('data', (chunk: Buffer) => {
      if (!output.write(chunk)) {
        socket.pause();
        output.once('drain', () => socket.resume());
      }
    });
    socket.once('end', () => {
      outEnded = true;
      output.end();
      finish();
    });
    socket.on('error', fail);
    socket.once('close', () => {
      if (!(inEnded && outEnded) && !gone) fail();
    });
    socket.resume();
  });
}
