import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { actors } from './helpers/actors.js';
import { TestServer, makeRepo } from './helpers/server.js';

// PR_GATEWAY end to end: an agent (its workshop token, with the real CLI) asks to publish its
// workspace as a branch; the diff shown is the server's; the branch lands in a real bare
// repository only once a person approves, never after a rejection, and once only (a restart
// does not push it again: the remote's reflog shows one update).
interface Approval {
  id: string;
  status: string;
  payload: Record<string, unknown>;
  effect: { appliedAt: string | null; error: string | null };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const git = (dir: string, ...args: string[]): string => execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8' }).trim();
const hasBranch = (dir: string, branch: string): boolean => {
  try {
    git(dir, 'rev-parse', '-q', '--verify', `refs/heads/${branch}`);
    return true;
  } catch {
    return false;
  }
};

describe('PR_GATEWAY: workshops publish', () => {
  let server: TestServer;
  let repo: string;
  let remoteDir: string;
  let remote: string;
  let ws: string;
  const { tokens, as, cliAs, workshopWithAgent } = actors(() => server);
  const publish = async (branch: string, extra: string[] = []): Promise<Approval> => {
    const r = await cliAs('agent', ['workshops', 'publish', ws, '--branch', branch, '--remote', remote, ...extra, '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    return JSON.parse(r.stdout) as Approval;
  };
  const settled = async (id: string): Promise<Approval> => {
    const until = Date.now() + 30_000;
    for (;;) {
      const a = (await as<Approval>('owner', 'GET', `/v1/approvals/${id}`)).body;
      if (a.effect.appliedAt || Date.now() > until) return a;
      await sleep(50);
    }
  };

  before(async () => {
    server = await TestServer.start();
    tokens.admin = server.token;
    assert.equal((await as('admin', 'POST', '/v1/users', { name: 'owner', role: 'member' })).status, 201);
    tokens.owner = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: 'owner', expiresInSeconds: 3600 })).body.token;
    repo = makeRepo({ 'README.md': '# demo\n' });
    remoteDir = mkdtempSync('/tmp/atelier-remote-');
    remote = join(remoteDir, 'origin.git');
    execFileSync('git', ['clone', '-q', '--bare', repo, remote]);
    git(remote, 'config', 'core.logAllRefUpdates', 'always');
    ws = await workshopWithAgent(repo, 'publish');
  });

  after(async () => {
    await server?.dispose();
    for (const d of [repo, remoteDir]) if (d) rmSync(d, { recursive: true, force: true });
  });

  it('bad input gets clear errors and files nothing', async () => {
    const none = await cliAs('agent', ['workshops', 'publish', ws, '--branch', 'nothing', '--remote', remote]);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /no changes to publish/);
    await server.exec(ws, ['sh', '-c', 'echo draft > draft.txt']);
    const branch = await cliAs('agent', ['workshops', 'publish', ws, '--branch', '../escape', '--remote', remote]);
    assert.equal(branch.code, 1);
    assert.match(branch.stderr, /payload\.branch/);
    const ext = await cliAs('agent', ['workshops', 'publish', ws, '--branch', 'x', '--remote', 'ext::sh -c touch% /tmp/pwned']);
    assert.equal(ext.code, 1);
    assert.match(ext.stderr, /payload\.remote/);
    const outside = await cliAs('agent', ['workshops', 'publish', ws, '--branch', 'x', '--remote', '/etc']);
    assert.equal(outside.code, 1);
    assert.match(outside.stderr, /payload\.remote/);
    const list = await as<{ items: Approval[] }>('owner', 'GET', '/v1/approvals?category=PR_GATEWAY');
    assert.equal(list.body.items.length, 0);
    await server.exec(ws, ['rm', 'draft.txt']);
  });

  it('the branch lands in the bare remote only after approval, with the diff that was shown, once', async () => {
    await server.exec(ws, ['sh', '-c', 'echo hello > hello.txt && echo "# demo, edited" > README.md']);
    const a = await publish('feature/hello', ['--title', 'Say hello']);
    assert.equal(a.status, 'PENDING');
    assert.match(String(a.payload.diff), /\+hello/);
    assert.match(String(a.payload.diff), /-# demo\n\+# demo, edited/);
    assert.match(String(a.payload.diffStat), /hello\.txt/);
    const shown = await cliAs('owner', ['approvals', 'show', a.id]);
    assert.match(shown.stdout, /publish branch feature\/hello to .*origin\.git/);
    assert.match(shown.stdout, /README\.md \| 2/);
    await sleep(500);
    assert.equal(hasBranch(remote, 'feature/hello'), false, 'nothing pushed before the decision');

    const ok = await cliAs('owner', ['approve', a.id, '--reason', 'looks good']);
    assert.equal(ok.code, 0, ok.stderr);
    const done = await settled(a.id);
    assert.equal(done.effect.error, null);
    assert.ok(done.effect.appliedAt);
    assert.equal(git(remote, 'show', 'feature/hello:hello.txt'), 'hello');
    assert.equal(git(remote, 'show', 'feature/hello:README.md'), '# demo, edited');
    assert.equal(git(remote, 'rev-parse', 'feature/hello^'), git(repo, 'rev-parse', 'HEAD'));
    assert.match(git(remote, 'log', '-1', '--format=%an %s', 'feature/hello'), /^Atelier Say hello$/);
    // The workspace itself is as the agent left it (nothing committed on its branch).
    assert.equal((await server.exec(ws, ['git', 'status', '--porcelain'])).stdout, ' M README.md\n?? hello.txt\n');

    const sha = git(remote, 'rev-parse', 'feature/hello');
    await server.stop();
    await server.boot();
    await sleep(1000);
    const after = (await as<Approval>('owner', 'GET', `/v1/approvals/${a.id}`)).body;
    assert.equal(after.effect.appliedAt, done.effect.appliedAt);
    assert.equal(git(remote, 'rev-parse', 'feature/hello'), sha);
    assert.equal(git(remote, 'reflog', 'show', '--format=%H', 'refs/heads/feature/hello').split('\n').length, 1);
  });

  it('rejected: never pushed; changed after filing: refused, nothing pushed', async () => {
    const r = await publish('feature/rejected');
    assert.equal((await cliAs('owner', ['approvals', 'reject', r.id, '--reason', 'no'])).code, 0);
    await sleep(1000);
    assert.equal(hasBranch(remote, 'feature/rejected'), false);

    const c = await publish('feature/changed');
    await server.exec(ws, ['sh', '-c', 'echo sneaky >> hello.txt']);
    assert.equal((await cliAs('owner', ['approve', c.id])).code, 0);
    const done = await settled(c.id);
    assert.match(String(done.effect.error), /workspace changed after the request was filed/);
    assert.equal(hasBranch(remote, 'feature/changed'), false);
  });
  it('a large diff is cut for the decider (the payload stays under its bound), the request still filed', async () => {
    await server.exec(ws, ['sh', '-c', 'seq 1 200000 | sed "s/$/ é/" > big.txt']);
    const a = await publish('feature/big');
    assert.equal(a.status, 'PENDING');
    assert.match(String(a.payload.diff), /\[diff truncated: see the workshop\]\n$/);
    assert.ok(Buffer.byteLength(String(a.payload.diff)) < 520 * 1024);
    assert.match(String(a.payload.diffStat), /big\.txt/);
    assert.equal((await cliAs('owner', ['approvals', 'reject', a.id, '--reason', 'too big'])).code, 0);
    await server.exec(ws, ['rm', 'big.txt']);
  });
});
