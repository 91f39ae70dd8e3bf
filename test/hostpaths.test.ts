import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { REPO_ROOT, TestServer, makeRepo, makeNobodyRepo, startRootlessServer } from './helpers/server.js';

// What a process inside a workshop can read about where it runs.
const LOOK = [
  'sh',
  '-c',
  'echo "== cmdline"; tr "\\0" " " < /proc/1/cmdline; echo; echo "== mountinfo"; cat /proc/self/mountinfo; echo "== cgroup"; cat /proc/self/cgroup; echo "== env"; env; echo "== usrlocal"; ls -A /usr/local; test -e /usr/local/bin/atelier && echo atelier-link; mkdir /usr/local/x 2>/dev/null && echo writable; echo end',
];

function leaks(text: string, paths: string[]): string[] {
  return paths.filter((p) => text.includes(p));
}

function section(text: string, name: string): string {
  return text.split(`== ${name}\n`)[1]?.split('\n== ')[0] ?? '';
}

describe('nothing inside a workshop names the host layout (root)', () => {
  let server: TestServer;
  let repo: string;
  before(async () => {
    server = await TestServer.start();
    repo = makeRepo();
  });
  after(async () => {
    await server?.dispose();
  });

  it('PID 1, mountinfo, cgroup and the environment show neither the data dir nor the repository nor the test paths', async () => {
    const w = await server.createWorkshop({ repo });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    const r = await server.exec(w.id, LOOK);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(leaks(r.stdout, [server.dataDir, repo, REPO_ROOT, '/tmp/atelier-test-', '/tmp/atelier-repo-']), [], r.stdout);
    // The sandbox's PID 1 is bwrap with its options read from a pipe; the workshop's binds come from
    // its own filesystem, so their roots are paths inside it.
    assert.match(section(r.stdout, 'cmdline'), /^bwrap --args 4 -- /);
    assert.match(section(r.stdout, 'mountinfo'), /^\d+ \d+ \S+ \/workspace \/workspace /m);
    assert.match(section(r.stdout, 'mountinfo'), /^\d+ \d+ \S+ \/home \/home\/atelier /m);
    for (const line of section(r.stdout, 'cgroup').trim().split('\n')) assert.doesNotMatch(line, /atelier|ws-/, line);
    // The host's /usr/local (hand-installed tools, the `atelier` link) is an empty read-only directory.
    assert.equal(section(r.stdout, 'usrlocal'), 'end\n');
  });
});

// The server started by an ordinary user (as in rootless.test.ts): workshops are user namespaces.

describe('nothing inside a workshop names the host layout (rootless)', () => {
  let server: TestServer;
  let base: string;
  let repo: string;
  before(async () => {
    ({ server, base } = await startRootlessServer('/tmp/atelier-rootless-'));
    repo = makeNobodyRepo();
  });
  after(async () => {
    await server?.dispose();
    rmSync(base, { recursive: true, force: true });
  });

  it('says that disk quotas are not enforced, at start and in status', async () => {
    assert.match(server.log, /disk quotas: not enforced: a rootless server cannot loop-mount/);
    const w = await server.createWorkshop({ repo });
    const r = await server.cli(['workshops', 'status', w.id]);
    assert.match(r.stdout, /disk:?\s+not enforced: a rootless server cannot loop-mount/);
    // Asking for a quota it cannot enforce is refused, never silently ignored.
    const asked = await server.api<{ code: string; message: string }>('POST', '/v1/workshops', { repo, disk: '1g' });
    assert.equal(asked.status, 422);
    assert.equal(asked.body.code, 'UNSUPPORTED');
    assert.match(asked.body.message, /disk quotas are not enforced: a rootless server .*: leave out disk/);
  });

  it('PID 1, cgroup and the environment name no host path; mountinfo names only the data dir', async () => {
    const w = await server.createWorkshop({ repo });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    const r = await server.exec(w.id, LOOK);
    assert.equal(r.exitCode, 0, r.stderr);
    const outside = ['cmdline', 'cgroup', 'env'].map((s) => section(r.stdout, s)).join('\n');
    assert.deepEqual(leaks(outside, [base, repo, REPO_ROOT, '/tmp/atelier-']), [], outside);
    // A bind shows its source's path within the host filesystem, and an unprivileged server
    // cannot give workshops a filesystem of their own: the workshop's directories stay visible
    // there (documented), and nothing else of the host's.
    assert.equal(section(r.stdout, 'usrlocal'), 'end\n', 'the host /usr/local is an empty read-only directory');
    const mountinfo = section(r.stdout, 'mountinfo');
    assert.deepEqual(leaks(mountinfo, [repo, REPO_ROOT]), [], mountinfo);
    for (const line of mountinfo.trim().split('\n')) {
      const root = line.split(' ')[3] ?? '';
      if (root.startsWith('/tmp/')) assert.ok(root.startsWith(`${server.dataDir}/workshops/${w.id}/`), line);
    }
  });
});
