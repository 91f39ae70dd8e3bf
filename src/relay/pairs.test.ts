import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Socket } from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { nodeRelay, relayPair, relaySpliced, type RelayEnd } from './pairs.js';

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

/** Everything read until the peer's end (resolves), or the error that ended it (rejects). */
function readAll(s: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  return new Promise((resolve, reject) => {
    s.once('end', () => resolve(Buffer.concat(chunks)));
    s.once('error', reject);
  });
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

type Relay = { done: Promise<RelayEnd>; cut(): void };
let tags = 0;

for (const [name, relay] of [
  ['nodeRelay (the raw tunnel relayed in Node: TLS, no python)', (a: Socket, b: Socket): Relay => nodeRelay(a, b)],
  [
    'relaySpliced (the raw tunnel spliced by the kernel)',
    (a: Socket, b: Socket): Relay => {
      const r = relaySpliced(a, b, { tag: `test-${++tags}` });
      assert.equal(r.spliced, true, 'plain TCP sockets are spliced');
      return r;
    },
  ],
  ['relayPair (the first bytes in Node, then spliced)', (a: Socket, b: Socket): Relay => relayPair(a, b, { tag: `test-${++tags}` })],
] as const) {
  /** client ↔ [a relay b] ↔ inside: what a tunnel hop is. */
  const hop = async (): Promise<{ client: Socket; inside: Socket; relay: Relay }> => {
    const [client, a] = await socketPair();
    const [b, inside] = await socketPair();
    return { client, inside, relay: relay(a, b) };
  };
  describe(name, () => {
    it('carries bytes both ways with half-close: the answer still comes after one side ended', async () => {
      const { client, inside, relay } = await hop();
      const big = randomBytes(5 << 20);
      const atInside = readAll(inside);
      client.end(big);
      assert.equal(sha(await atInside), sha(big));
      const atClient = readAll(client);
      inside.end('answer after the half-close');
      assert.equal((await atClient).toString(), 'answer after the half-close');
      const end = await relay.done;
      assert.deepEqual(end, { aToB: big.length, bToA: 27 });
    });

    it('a reset on one side resets the other, and says which side failed', async () => {
      const { client, inside, relay } = await hop();
      const atClient = readAll(client);
      inside.write('partial');
      await new Promise((r) => setTimeout(r, 50));
      inside.resetAndDestroy();
      await assert.rejects(atClient, (err: NodeJS.ErrnoException) => err.code === 'ECONNRESET');
      const end = await relay.done;
      assert.equal(end.failed, 'b');
      assert.equal(end.error, 'ECONNRESET');
    });

    it('cut() resets both sides', async () => {
      const { client, inside, relay } = await hop();
      const atClient = readAll(client);
      const atInside = readAll(inside);
      relay.cut();
      await assert.rejects(atClient, (err: NodeJS.ErrnoException) => err.code === 'ECONNRESET');
      await assert.rejects(atInside, (err: NodeJS.ErrnoException) => err.code === 'ECONNRESET');
      assert.equal((await relay.done).error, 'cut');
    });
  });
}

describe('relayPair, moving from Node to the splice relay mid-stream', () => {
  const hop = async (): Promise<{ client: Socket; inside: Socket; relay: Relay }> => {
    const [client, a] = await socketPair();
    const [b, inside] = await socketPair();
    return { client, inside, relay: relayPair(a, b, { tag: `early-${++tags}` }) };
  };

  it('a request, its answer, then bulk both ways: every byte in order, whichever relay carried it', async () => {
    const { client, inside, relay } = await hop();
    const request = new Promise<Buffer>((r) => inside.once('data', r));
    client.write('PING\n');
    assert.equal((await request).toString(), 'PING\n');
    const answer = new Promise<Buffer>((r) => client.once('data', r));
    inside.write('PONG\n');
    assert.equal((await answer).toString(), 'PONG\n');
    // Now (the first answer went back) the pair is handed to the splice relay, while bytes flow.
    const up = randomBytes(3 << 20);
    const down = randomBytes(3 << 20);
    const atInside = readAll(inside);
    const atClient = readAll(client);
    client.end(up);
    inside.end(down);
    assert.equal(sha(await atInside), sha(up));
    assert.equal(sha(await atClient), sha(down));
    assert.deepEqual(await relay.done, { aToB: up.length + 5, bToA: down.length + 5 });
  });

  it('a reset before any answer (still in Node) resets the other side, and says which side failed', async () => {
    const { client, inside, relay } = await hop();
    const atClient = readAll(client);
    client.write('hello');
    await new Promise((r) => inside.once('data', r));
    inside.resetAndDestroy();
    await assert.rejects(atClient, (err: NodeJS.ErrnoException) => err.code === 'ECONNRESET');
    const end = await relay.done;
    assert.equal(end.failed, 'b');
    assert.equal(end.error, 'ECONNRESET');
  });
});
