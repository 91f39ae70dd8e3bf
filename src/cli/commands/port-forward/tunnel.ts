import type { Readable, Writable } from 'node:stream';
import { AtelierError } from '../../../core/index.js';
import type { Target } from '../../client.js';
import { asBuffer, eventError, openTerminalSocket, parseEvent, type TerminalSocket } from '../../socket.js';

/** Above this many bytes queued towards the server, the local side is paused. */
const HIGH_WATER = 1 << 20;
const LOW_WATER = 256 << 10;

/** Opens a byte tunnel to `port` inside the workshop; resolves once the remote port has answered. */
export function openTunnel(target: Target, id: string, port: number, resume: boolean): Promise<TerminalSocket> {
  return openTerminalSocket(target, `/v1/workshops/${encodeURIComponent(id)}/tunnel?port=${port}&resume=${resume}`);
}

/**
 * Relays a local byte stream through a tunnel WebSocket with backpressure both ways (a side that
 * does not read pauses the other, nothing is buffered without limit) and half-close as `eof`
 * frames. Resolves when the tunnel closes normally; rejects with the reason otherwise.
 */
export function pipeTunnel(tunnel: TerminalSocket, input: Readable, output: Writable, onEnd?: () => void): Promise<void> {
  const ws = tunnel.ws;
  return new Promise<void>((resolve, reject) => {
    let failure: Error | undefined;
    let remoteEof = false;
    let waiting: NodeJS.Timeout | undefined;
    const onData = (chunk: Buffer): void => {
      if (ws.readyState !== ws.OPEN) return;
      ws.send(chunk, { binary: true });
      if (ws.bufferedAmount > HIGH_WATER && !waiting) {
        input.pause();
        waiting = setInterval(() => {
          if (ws.bufferedAmount <= LOW_WATER || ws.readyState !== ws.OPEN) {
            clearInterval(waiting);
            waiting = undefined;
            input.resume();
          }
        }, 2);
      }
    };
    input.on('data', onData);
    input.once('end', () => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'eof' }));
    });
    input.on('error', () => ws.close(1000));
    output.on('error', () => ws.close(1000));
    tunnel.listen((data, isBinary) => {
      if (isBinary) {
        if (!output.write(asBuffer(data))) {
          ws.pause();
          output.once('drain', () => ws.resume());
        }
        return;
      }
      let event;
      try {
        event = parseEvent(data);
      } catch (err) {
        failure = err as Error;
        return;
      }
      if (event.type === 'eof') {
        remoteEof = true;
        output.end();
        onEnd?.();
      } else if (event.type === 'error') failure = eventError(event);
    });
    ws.on('error', () => undefined);
    ws.on('close', (code) => {
      if (waiting) clearInterval(waiting);
      input.off('data', onData);
      if (failure) return reject(failure);
      if (code !== 1000 && !remoteEof)
        return reject(new AtelierError('UNAVAILABLE', 'the tunnel was cut (server restarted or network down)'));
      resolve();
    });
  });
}
