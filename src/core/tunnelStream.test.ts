import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { AtelierError } from './errors.js';
import { TunnelStream } from './tunnelStream.js';

/** Two real sockets connected over loopback (port 0). */
async function socketPair(): Promise<[Socket, Socket]> {
  const server = createServer({ allowHalfOpen: true });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const client = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  await new Promise((r) => client.once('connect', r));
  const other = await accepted;
  server.close();
  return [client, other];
}

function collect(t: TunnelStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  t.on('data', (c: Buffer) => chunks.push(c));
  return new Promise((resolve, reject) => {
    t.once('end', () => resolve(Buffer.concat(chunks)));
    t.once('error', reject);
  });
}

function frame(type: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(5);
  h[0] = type;
  h.writeUInt32BE(payload.length, 1);
  return Buffer.concat([h, payload]);
}

describe('TunnelStream (Upgrade: atelier-tunnel frames)', () => {
  it('carries bytes both ways with half-close, then both ends close', async () => {
    const [a, b] = await socketPair();
    const ta = new TunnelStream(a);
    const tb = new TunnelStream(b);
    const big = randomBytes(3 << 20);
    const atB = collect(tb);
    ta.end(big);
    assert.deepEqual(await atB, big);
    // B has seen A's end and may still answer.
    const atA = collect(ta);
    tb.end(Buffer.from('answer after the half-close'));
    assert.equal((await atA).toString(), 'answer after the half-close');
    await Promise.all([new Promise((r) => a.once('close', r)), new Promise((r) => b.once('close', r))]);
  });

  it('parses frames split at any byte', async () => {
    const [a, b] = await socketPair();
    const tb = new TunnelStream(b);
    const got = collect(tb);
    const wire = Buffer.concat([
      frame(0, Buffer.from('hello ')),
      frame(0, Buffer.alloc(0)),
      frame(0, Buffer.from('world')),
      frame(1, Buffer.alloc(0)),
    ]);
    for (const byte of wire) {
      a.write(Buffer.from([byte]));
      await new Promise((r) => setImmediate(r));
    }
    assert.equal((await got).toString(), 'hello world');
    a.destroy();
  });

  it("reports the peer's ERROR frame with its code, and a cut without EOF as such", async () => {
    const [a, b] = await socketPair();
    const ta = new TunnelStream(a);
    const tb = new TunnelStream(b);
    ta.on('data', () => undefined);
    const failed = new Promise<Error>((r) => ta.once('error', r));
    // The side that failed closes quietly (no error of its own, nothing left open).
    const failerClosed = new Promise((r) => tb.once('close', r));
    tb.fail('PORT_CLOSED', 'nothing listens there');
    await failerClosed;
    const err = await failed;
    assert.ok(err instanceof AtelierError);
    assert.equal(err.code, 'PORT_CLOSED');
    assert.equal(err.message, 'nothing listens there');

    const [c, d] = await socketPair();
    const tc = new TunnelStream(c, Buffer.alloc(0), 'the tunnel was cut');
    tc.on('data', () => undefined);
    const cut = new Promise<Error>((r) => tc.once('error', r));
    d.destroy();
    assert.match((await cut).message, /the tunnel was cut/);
  });

  it('refuses a frame it does not know, or a length beyond the limit', async () => {
    const [a, b] = await socketPair();
    const tb = new TunnelStream(b);
    tb.on('data', () => undefined);
    const bad = new Promise<Error>((r) => tb.once('error', r));
    a.write(frame(0, Buffer.alloc(0)).fill(0xff, 1, 5));
    assert.match((await bad).message, /broke the protocol/);
    a.destroy();
  });
});
