import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { respCommand } from './resp.js';

/** A unix-socket server that records the request and answers `reply` in one-byte writes (replies split anywhere). */
async function withServer(reply: string, fn: (path: string, seen: () => string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'atelier-resp-'));
  const path = join(dir, 's.sock');
  let seen = '';
  const server = createServer((socket) => {
    socket.on('data', async (d) => {
      seen += d.toString();
      for (const ch of reply) {
        socket.write(ch);
        await new Promise((r) => setImmediate(r));
      }
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  try {
    await fn(path, () => seen);
  } finally {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('respCommand', () => {
  it('encodes the command as a RESP array and reads a split simple reply', () =>
    withServer('+PONG\r\n', async (path, seen) => {
      assert.equal(await respCommand(path, ['PING']), 'PONG');
      assert.equal(seen(), '*1\r\n$4\r\nPING\r\n');
    }));

  it('reads bulk strings, integers, nulls and arrays', async () => {
    await withServer('$4\r\nhé!\r\n', async (path) => assert.equal(await respCommand(path, ['GET', 'k']), 'hé!'));
    await withServer('*3\r\n:1\r\n$-1\r\n*1\r\n+x\r\n', async (path) => assert.deepEqual(await respCommand(path, ['X']), [1, null, ['x']]));
  });

  it('returns server errors as Error values and rejects when the connection fails', async () => {
    await withServer('-ERR unknown command\r\n', async (path) => {
      const reply = await respCommand(path, ['NOPE']);
      assert.ok(reply instanceof Error);
      assert.equal(reply.message, 'ERR unknown command');
    });
    await assert.rejects(respCommand('/nonexistent/redis.sock', ['PING']), /simulator socket \/nonexistent\/redis.sock is not there/);
  });
});
