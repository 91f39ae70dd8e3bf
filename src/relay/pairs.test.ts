import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Socket } from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { nodeRelay, relaySpliced, type RelayEnd } from './pairs.js';

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

    // An echo both ways at once (what the raw-tunnel test's 20 MB transfer is): a relay that
    // stopped reading one side while it waited for the other to drain would deadlock here.
    it('an echo of 20 MiB both ways at once: every byte back, in order', { timeout: 120_000 }, async () => {
      const { client, inside, relay } = await hop();
      inside.pipe(inside);
      const big = randomBytes(20 << 20);
      const back = new Promise<Buffer>((resolve, reject) => {
        const chunks: Buffer[] = [];
        let n = 0;
        client.on('data', (c: Buffer) => {
          chunks.push(c);
          n += c.length;
          if (n >= big.length) resolve(Buffer.concat(chunks));
        });
        client.once('error', reject);
      });
      client.write(big);
      assert.equal(sha(await back), sha(big));
      client.end();
      const end = await relay.done;
      assert.deepEqual(end, { aToB: big.length, bToA: big.length });
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
