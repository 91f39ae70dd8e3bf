import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { BIN, TestServer, makeRepo } from './helpers/server.js';

// The agent's side and the watcher's side through the real CLI: `approvals request --wait`
// returns once a person approves (exit 0) and fails when rejected (exit 1); `approvals watch`
// prints each event as one line while it happens.
describe('approvals from the CLI', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;
  let agent: string;

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo();
    ws = (await server.createWorkshop({ repo, name: 'cli-approvals' })).id;
    agent = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: ws, expiresInSeconds: 600 })).body.token;
  });

  after(async () => {
    await server?.dispose();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  /** Runs the CLI in the background, collecting its output; resolves with its exit code. */
  const background = (args: string[], token: string) => {
    const p = spawn(process.execPath, [BIN, ...args], {
      env: { ...server.env(), ATELIER_TOKEN: token },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out = { stdout: '', stderr: '' };
    p.stdout.on('data', (c: Buffer) => (out.stdout += c.toString()));
    p.stderr.on('data', (c: Buffer) => (out.stderr += c.toString()));
    const code = new Promise<number | null>((r) => p.on('close', (c) => r(c)));
    return { p, out, code };
  };
  const until = async (cond: () => boolean, what: string): Promise<void> => {
    const end = Date.now() + 20_000;
    while (!cond()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  it('watch prints the request and its decision; request --wait exits 0 once approved and 1 once rejected', async () => {
    const watch = background(['approvals', 'watch'], server.token);
    await until(() => watch.out.stderr.includes('watching approval requests'), 'the watch to start');

    const ask = (host: string) =>
      background(
        [
          'approvals',
          'request',
          '--category',
          'ALLOWLIST_EXPANSION',
          '--payload',
          JSON.stringify({ host, justification: 'cli test' }),
          '--wait',
        ],
        agent,
      );
    const first = ask('first.example');
    await until(() => /waiting for a decision on ([0-9a-f-]{36})/.test(first.out.stderr), 'the request to be filed');
    const id1 = /waiting for a decision on ([0-9a-f-]{36})/.exec(first.out.stderr)![1]!;
    await until(() => watch.out.stdout.includes(`${id1} waiting`), 'the watch to show the request');
    assert.match(
      watch.out.stdout,
      new RegExp(`\\[approval\\] ${id1} waiting: ALLOWLIST_EXPANSION reach first\\.example for ${ws} — \`atelier approve ${id1}\``),
    );
    const approve = await server.cli(['approve', id1, '--reason', 'yes']);
    assert.equal(approve.code, 0, approve.stderr);
    assert.equal(await first.code, 0, first.out.stderr);
    assert.match(first.out.stdout, /status:\s+APPROVED/);
    await until(() => watch.out.stdout.includes(`${id1} APPROVED by admin`), 'the watch to show the decision');

    const second = ask('second.example');
    await until(() => /waiting for a decision on ([0-9a-f-]{36})/.test(second.out.stderr), 'the second request');
    const id2 = /waiting for a decision on ([0-9a-f-]{36})/.exec(second.out.stderr)![1]!;
    assert.equal((await server.cli(['approvals', 'reject', id2, '--reason', 'no'])).code, 0);
    assert.equal(await second.code, 1);
    assert.match(second.out.stderr, /was rejected by admin: no \(PERMISSION_DENIED\)/);

    // An agent token is refused when it tries to decide, with a clear message.
    const self = await server.cli(['approve', id2], { env: { ATELIER_TOKEN: agent } });
    assert.equal(self.code, 1);
    assert.match(self.stderr, /agent token cannot do this/);
    watch.p.kill();
    await watch.code;
  });
});
