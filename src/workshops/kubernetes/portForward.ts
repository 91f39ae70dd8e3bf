import { Duplex } from 'node:stream';
import type { KubeConnection } from './client.js';
import { openPodStream } from './podStream.js';

/**
 * One TCP connection to a port in a pod through the API server's `pods/portforward`, as a Duplex
 * (what a tunnel pipes its client into). The WebSocket protocol (`v4.channel.k8s.io`, the
 * kubelet's own, which the API server passes through): per requested port a data channel and an
 * error channel (0 and 1 for the one port here); the first message on each starts with the port
 * as 2 bytes, little-endian, which is checked and dropped; what else comes on the error channel
 * is the kubelet's reason the connection failed (`failed to dial …`).
 *
 * The protocol has no half-close: nothing tells the pod's side that this side will send no more
 * while still reading. So ending the Duplex's writable side closes the whole connection (after
 * what was written has gone out), and the pod's side closing ends the readable side. A tunnel
 * whose client half-closes (rare: SSH and HTTP do not) loses the answer that would have followed.
 * (kubectl's newer tunnel, SPDY framed inside the WebSocket, has half-close; it is not spoken here.)
 */

export class PortForwardError extends Error {
  override name = 'PortForwardError';
}

/** Opens a connection to `port` in the pod; rejects when the API server refuses (PodStreamError). */
export async function podPortForward(connection: KubeConnection, namespace: string, pod: string, port: number): Promise<Duplex> {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new PortForwardError(`port ${port}: not a TCP port (1–65535)`);
  const ws = await openPodStream(connection, namespace, pod, 'portforward', [['ports', String(port)]], ['v4.channel.k8s.io']);
  const what = `pods/portforward ${namespace}/${pod} port ${port}`;
  const seen = [false, false];
  let failure = '';
  const duplex = new Duplex({
    read() {
      ws.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      // Closing already: the close says why (the kubelet's reason, or the pod's side ending).
      if (ws.readyState !== ws.OPEN) return cb();
      ws.send(Buffer.concat([Buffer.from([0]), chunk]), cb);
    },
    final(cb) {
      // No half-close in the protocol: the end of what this side sends is the end of the connection.
      ws.close(1000);
      cb();
    },
    destroy(err, cb) {
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.terminate();
      cb(err);
    },
  });
  ws.on('message', (msg: Buffer) => {
    const channel = msg[0];
    let body = msg.subarray(1);
    if (channel !== 0 && channel !== 1) return;
    if (!seen[channel]) {
      if (body.length < 2) return;
      const got = body.readUInt16LE(0);
      if (got !== port) {
        duplex.destroy(new PortForwardError(`${what}: the API server answered for port ${got}`));
        return;
      }
      seen[channel] = true;
      body = body.subarray(2);
    }
    if (body.length === 0) return;
    if (channel === 1) failure += body.toString('utf8');
    else if (!duplex.push(body)) ws.pause();
  });
  ws.on('error', () => undefined);
  ws.once('close', () => {
    if (failure) duplex.destroy(new PortForwardError(`${what}: ${failure.trim()}`));
    else duplex.push(null);
  });
  return duplex;
}
