import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SpliceRelay } from './splice.js';

const relay = new SpliceRelay();
after(() => relay.close());

/**
 * Two connections through a relay point: `outer` is the client's end, `inner` the far end;
 * `a` and `b` are the relay's own sockets (a accepted from outer, b connected to inner).
 */
async function tunnel(path?: string): Promise<{ outer: Socket; inner: Socket; a: Socket; b: Socket; server: Server }> {
  const farServer = createServer({ allowHalfOpen: true });
  const relayServer = createServer({ allowHalfOpen: true });
  const listen = (s: Server, p?: string): Promise<string | number> =>
    new Promise((r) => (p ? s.listen(p, () => r(p)) : s.listen(0, '127.0.0.1', () => r((s.address() as { port: number }).port))));
  const far = await listen(farServer, path ? `${path}.far` : undefined);
  const near = await listen(relayServer, path ? `${path}.near` : undefined);
  const dial = (where: string | number): Socket =>
    typeof where === 'string'
      ? connect({ path: where, allowHalfOpen: true })
      : connect({ port: where, host: '127.0.0.1', allowHalfOpen: true });
  const acceptedA = new Promise<Socket>((r) => relayServer.once('connection', r));
  const outer = dial(near);
  const a = await acceptedA;
  const acceptedInner = new Promise<Socket>((r) => farServer.once('connection', r));
  const b = dial(far);
  await new Promise((r) => b.once('connect', r));
  const inner = await acceptedInner;
  farServer.close();
  return { outer, inner, a, b, server: relayServer };
}

function drain(s: Socket): Promise<{ sha: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  s.on('data', (c: Buffer) => {
    hash.update(c);
    bytes += c.length;
  });
  return new Promise((resolve, reject) => {
    s.once('end', () => resolve({ sha: hash.digest('hex'), bytes }));
    s.once('error', reject);
  });
}

async function send(s: Socket, data: Buffer): Promise<void> {
  for (let i = 0; i < data.length; i += 1 << 20) {
    if (!s.write(data.subarray(i, i + (1 << 20)))) await new Promise((r) => s.once('drain', r));
  }
  s.end();
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Resolves once both sockets were handed to the relay's child (the parent's duplicates are then destroyed). */
async function handedOver(a: Socket, b: Socket): Promise<void> {
  while (!a.destroyed || !b.destroyed) await new Promise((r) => setTimeout(r, 5));
}

describe('SpliceRelay (zero-copy tunnels through splice-relay.py)', () => {
  it('carries 20 MB each way at once with identical checksums, half-close both ways, and counts the bytes', async () => {
    const t = await tunnel();
    assert.equal(relay.usable(t.a, t.b), true, 'plain TCP sockets can be spliced');
    const up = randomBytes(20 << 20);
    const down = randomBytes(20 << 20);
    const result = relay.relay(t.a, t.b);
    const [gotUp, gotDown] = await Promise.all([drain(t.inner), drain(t.outer), send(t.outer, up), send(t.inner, down)]);
    assert.deepEqual(gotUp, { sha: sha(up), bytes: up.length }, 'upload arrived whole');
    assert.deepEqual(gotDown, { sha: sha(down), bytes: down.length }, 'download arrived whole');
    assert.deepEqual(await result, { aToB: up.length, bToA: down.length }, 'the pair ended cleanly with its counts');
    t.outer.destroy();
    t.inner.destroy();
    // The relay's server lost its connection to the child: its close() must not wait on it.
    await new Promise((r) => t.server.close(r));
  });

  it('keeps one direction open after the other half-closed', async () => {
    const t = await tunnel();
    const result = relay.relay(t.a, t.b);
    t.outer.end('request');
    const got = await drain(t.inner);
    assert.equal(got.bytes, 7, 'the request arrived, then its end');
    const reply = drain(t.outer);
    t.inner.end('answer after the end of the request');
    assert.equal((await reply).bytes, 'answer after the end of the request'.length, 'the other direction still carried bytes');
    assert.equal((await result).error, undefined, 'a clean end');
    t.outer.destroy();
    t.inner.destroy();
    t.server.close();
  });

  it('sends bytes the caller had already read first, and what Node had buffered', async () => {
    const t = await tunnel();
    const early = new Promise<void>((r) => t.a.once('readable', () => r()));
    t.outer.write('buffered-in-node;');
    await early;
    const got = drain(t.inner);
    const result = relay.relay(t.a, t.b, { fromA: Buffer.from('already-read;') });
    t.outer.end('spliced');
    const text = await got;
    assert.equal(text.bytes, 'already-read;buffered-in-node;spliced'.length, 'all three parts arrived');
    t.inner.end();
    assert.equal((await result).aToB, text.bytes, 'the count includes what Node forwarded itself');
    t.outer.destroy();
    t.inner.destroy();
    t.server.close();
  });

  it('passes a reset on: the far end resets, the client end is reset too, and the result names the side', async () => {
    const t = await tunnel();
    const result = relay.relay(t.a, t.b);
    const outerError = new Promise<string>((r) => t.outer.once('error', (e: NodeJS.ErrnoException) => r(e.code ?? '')));
    const through = new Promise((r) => t.outer.once('data', r));
    t.inner.write('x');
    await through;
    // Reset once the child relays the pair (this process's descriptors are closed after the
    // hand-over), not while it is still being handed over: on a busy machine 20 ms was not enough.
    await handedOver(t.a, t.b);
    t.inner.resetAndDestroy();
    const r = await result;
    assert.equal(r.error, 'ECONNRESET', `the pair ended on a reset: ${JSON.stringify(r)}`);
    assert.equal(r.side, 1, 'on the far side (b)');
    assert.equal(await outerError, 'ECONNRESET', 'the client saw a reset, not a clean end');
    t.server.close();
  });

  it('cuts every pair of a tag at once and leaves the others', async () => {
    const [x, y, z] = [await tunnel(), await tunnel(), await tunnel()];
    const rx = relay.relay(x.a, x.b, { tag: 'ws-1' });
    const ry = relay.relay(y.a, y.b, { tag: 'ws-1' });
    const rz = relay.relay(z.a, z.b, { tag: 'ws-2' });
    // Both sockets of a pair reached the child once a byte goes through.
    for (const t of [x, y, z]) {
      const got = new Promise((r) => t.inner.once('data', r));
      t.outer.write('.');
      await got;
    }
    const resets = [x, y].map((t) => new Promise<string>((r) => t.outer.once('error', (e: NodeJS.ErrnoException) => r(e.code ?? ''))));
    for (const t of [x, y]) t.inner.on('error', () => {});
    relay.closeTag('ws-1');
    assert.equal((await rx).error, 'ECANCELED', 'the first pair of the tag was cut');
    assert.equal((await ry).error, 'ECANCELED', 'the second too');
    assert.deepEqual(await Promise.all(resets), ['ECONNRESET', 'ECONNRESET'], 'their clients saw a reset');
    const got = drain(z.inner);
    z.outer.end('still here');
    assert.equal((await got).bytes, 'still here'.length, 'the other tag still relays');
    z.inner.end();
    assert.equal((await rz).error, undefined, 'and ends cleanly');
    for (const t of [x, y, z]) {
      t.outer.destroy();
      t.inner.destroy();
      t.server.close();
    }
  });

  it('relays unix sockets too', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'splice-'));
    try {
      const t = await tunnel(join(dir, 's'));
      const data = randomBytes(3 << 20);
      const result = relay.relay(t.a, t.b);
      const [got] = await Promise.all([drain(t.inner), send(t.outer, data)]);
      assert.equal(got.sha, sha(data), 'identical bytes over unix sockets');
      t.inner.end();
      assert.equal((await result).aToB, data.length, 'counted');
      t.outer.destroy();
      t.inner.destroy();
      t.server.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('SpliceRelay descriptors', () => {
  it('closes every socket and pipe of the pairs that ended (the helper leaks no descriptor)', async () => {
    // One pair first, so that the helper runs and holds nothing: its baseline.
    const first = await tunnel();
    const ended = relay.relay(first.a, first.b);
    first.outer.end();
    first.inner.end();
    first.outer.resume();
    first.inner.resume();
    await ended;
    first.server.close();
    const fds = (): number => readdirSync(`/proc/${relay.pid!}/fd`).length;
    const baseline = fds();
    const ends: Promise<unknown>[] = [];
    for (let i = 0; i < 20; i++) {
      const t = await tunnel();
      for (const s of [t.outer, t.inner]) s.on('error', () => {});
      ends.push(relay.relay(t.a, t.b, { tag: 'many' }));
      if (i % 2) t.inner.resetAndDestroy();
      else {
        t.outer.end('x');
        t.inner.on('data', () => {});
        t.inner.end();
        t.outer.on('data', () => {});
      }
      t.server.close();
    }
    await Promise.all(ends);
    assert.equal(fds(), baseline, 'as many descriptors as before the 20 pairs');
  });
});

describe('SpliceRelay cuts and deaths', () => {
  it('cuts a pair whose tag is closed while it is still being handed over', async () => {
    const t = await tunnel();
    for (const x of [t.outer, t.inner]) {
      x.on('error', () => {});
      x.on('data', () => {});
    }
    const closed = [t.outer, t.inner].map((x) => new Promise<void>((r) => x.once('close', () => r()).once('end', () => r())));
    const result = relay.relay(t.a, t.b, { tag: 'early', fromA: Buffer.from('x') });
    relay.closeTag('early');
    assert.equal((await result).error, 'ECANCELED', 'the pair was cut, not relayed');
    // Both ends are ended: a reset, or (this early, when Node had just written to a side) an end.
    await Promise.all(closed);
    t.server.close();
  });

  it('resets the pairs it relays when its parent process dies (kill -9)', async () => {
    const far = createServer({ allowHalfOpen: true });
    await new Promise<void>((r) => far.listen(0, '127.0.0.1', () => r()));
    const port = (far.address() as { port: number }).port;
    const accepted: Socket[] = [];
    far.on('connection', (s) => accepted.push(s));
    // A parent of its own: connects twice to `far` and relays the two connections.
    const script = `
      import { connect } from 'node:net';
      import { SpliceRelay } from ${JSON.stringify(new URL('./splice.ts', import.meta.url).href)};
      const dial = () => new Promise((r) => { const s = connect({ port: ${port}, host: '127.0.0.1', allowHalfOpen: true }, () => r(s)); });
      const [a, b] = [await dial(), await dial()];
      void new SpliceRelay().relay(a, b);
      // Once the child holds both sockets (this process's duplicates are destroyed after the hand-over).
      const handed = setInterval(() => { if (a.destroyed && b.destroyed) { clearInterval(handed); process.stdout.write('relaying\\n'); } }, 5);
      setInterval(() => {}, 1000);
    `;
    const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve, reject) => {
      parent.stdout.on('data', (c: Buffer) => c.toString().includes('relaying') && resolve());
      parent.once('exit', (code) => reject(new Error(`the parent exited early (${code})`)));
    });
    assert.equal(accepted.length, 2, 'both connections reached far');
    const [x, y] = accepted as [Socket, Socket];
    const got = new Promise((r) => y.once('data', r));
    x.write('through');
    await got;
    const errors = [x, y].map(
      (s) => new Promise<string>((r) => s.once('error', (e: NodeJS.ErrnoException) => r(e.code ?? '')).once('end', () => r('end'))),
    );
    parent.kill('SIGKILL');
    assert.deepEqual(await Promise.all(errors), ['ECONNRESET', 'ECONNRESET'], 'a reset, not a clean end');
    far.close();
  });
});

describe('SpliceRelay limits and failures', () => {
  it('cuts a pair idle for idleMs with ETIMEDOUT, and reports EHELPER for pairs it held when the helper died', async () => {
    const own = new SpliceRelay();
    try {
      const t = await tunnel();
      for (const s of [t.outer, t.inner]) s.on('error', () => {});
      const r = await own.relay(t.a, t.b, { idleMs: 300 });
      assert.equal(r.error, 'ETIMEDOUT', `an idle pair is cut: ${JSON.stringify(r)}`);
      t.server.close();
      const u = await tunnel();
      for (const s of [u.outer, u.inner]) s.on('error', () => {});
      const pending = own.relay(u.a, u.b);
      const got = new Promise((res) => u.inner.once('data', res));
      u.outer.write('.');
      await got;
      own.close();
      assert.equal((await pending).error, 'EHELPER', 'a dead helper ends what it held');
      assert.equal(own.usable(u.outer), false, 'and is not used again');
      u.server.close();
    } finally {
      own.close();
    }
  });
});
