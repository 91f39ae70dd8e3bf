import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer, makeRepo, processesNaming, HARD_TO_DELETE } from './helpers/server.js';
import { ExternalPostgres } from './helpers/postgres.js';

type W = {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
  warnings: string[];
  forwardPorts: number[];
  budgetUsd: number | null;
  limits: { cpus: number; memoryBytes: number; pids: number };
};

// One contract, three set-ups: the embedded cluster, an external PostgreSQL, and two nodes on an
// external PostgreSQL where every call goes through the node that does not run the workshops
// (it is drained, so they are placed on the other: docs/replicas.md).
for (const mode of ['embedded', 'external', 'relayed'] as const) {
  describe(`workshops contract (${mode === 'relayed' ? 'through a non-owner node' : `${mode} database`})`, () => {
    let server: TestServer;
    let owner: TestServer | undefined;
    let external: ExternalPostgres | undefined;
    let keyDir: string | undefined;
    let repo: string;
    // Where the workshops' sandboxes live: the data dir of the node that runs them.
    const sandboxes = (): string => (owner ?? server).dataDir;

    before(async () => {
      if (mode !== 'embedded') external = ExternalPostgres.start();
      if (mode === 'relayed') {
        keyDir = mkdtempSync('/tmp/atelier-key-');
        const env = { ATELIER_MASTER_KEY_FILE: join(keyDir, 'master.key') };
        owner = await TestServer.start({ databaseUrl: external!.url, env, args: ['--node-name', 'owner'] });
        server = await TestServer.start({ databaseUrl: external!.url, env, args: ['--node-name', 'edge'] });
        server.token = owner.token;
        const drained = await server.api('POST', '/v1/nodes/edge/drain');
        assert.equal(drained.status, 200, JSON.stringify(drained.body));
      } else server = await TestServer.start(external ? { databaseUrl: external.url } : {});
      repo = makeRepo({ 'README.md': '# demo\n', 'src/app.js': 'console.log(1)\n' });
    });
    after(async () => {
      await server?.dispose();
      await owner?.dispose();
      external?.stop();
      if (keyDir) rmSync(keyDir, { recursive: true, force: true });
    });

    it('creates a running workshop, lists it and shows its status', async () => {
      const r = await server.cli([
        'workshops',
        'create',
        '--repo',
        repo,
        '--name',
        `demo-${mode}`,
        '--budget',
        '12.5',
        '--cpus',
        '1',
        '--memory',
        '512m',
        '-o',
        'json',
      ]);
      assert.equal(r.code, 0, r.stderr);
      const w = JSON.parse(r.stdout) as W & { createdAt: string };
      assert.match(w.id, /^ws-[0-9a-z]{8}$/);
      assert.equal(w.status, 'Running');
      assert.equal(w.name, `demo-${mode}`);
      assert.equal(w.budgetUsd, 12.5);
      assert.deepEqual(w.limits, { cpus: 1, memoryBytes: 512 * 2 ** 20, pids: 1024 });
      assert.ok(!Number.isNaN(Date.parse(w.createdAt)));

      const list = await server.cli(['workshops', 'list', '-o', 'json']);
      assert.ok((JSON.parse(list.stdout) as W[]).some((x) => x.id === w.id));
      const table = await server.cli(['workshops', 'list']);
      assert.match(table.stdout, new RegExp(`${w.id}\\s+demo-${mode}\\s+Running`));
      const status = await server.cli(['workshops', 'status', w.id, '-o', 'yaml']);
      assert.match(status.stdout, /status: Running/);

      const env = await server.exec(w.id, ['sh', '-c', 'echo "$ATELIER_MAX_BUDGET_USD $ATELIER_WORKSHOP_ID"; cat README.md']);
      assert.equal(env.stdout, `12.5 ${w.id}\n# demo\n`);
    });

    it('exec streams output, separates stderr and returns the exit code (CLI and API)', async () => {
      const w = await server.createWorkshop({ repo });
      const r = await server.cli([
        'exec',
        w.id,
        '--cwd',
        'src',
        '--env',
        'GREETING=hello world',
        '--',
        'sh',
        '-c',
        'echo "$GREETING from $(pwd)"; echo oops >&2; exit 7',
      ]);
      assert.equal(r.code, 7);
      assert.equal(r.stdout, 'hello world from /workspace/src\n');
      assert.equal(r.stderr, 'oops\n');

      // No stdin is given: a command reading it sees end-of-file at once.
      const cat = await server.exec(w.id, ['cat']);
      assert.equal(cat.exitCode, 0);
      assert.equal(cat.stdout, '');

      const withInput = await server.cli(['exec', '-i', w.id, '--', 'tr', 'a-z', 'A-Z'], { input: 'shout\n' });
      assert.equal(withInput.stdout, 'SHOUT\n');

      // Large output (8 MiB) arrives complete through the stream.
      const big = await server.cli(['exec', w.id, '--', 'sh', '-c', 'head -c 8388608 /dev/zero | tr "\\0" x']);
      assert.equal(big.code, 0);
      assert.equal(big.stdout.length, 8 << 20);

      const missing = await server.cli(['exec', w.id, '--', 'no-such-command']);
      assert.equal(missing.code, 127);

      const timeout = await server.exec(w.id, ['sleep', '30'], { timeoutSeconds: 0.5 });
      assert.equal(timeout.exitCode, 124);

      const killed = await server.exec(w.id, ['sh', '-c', 'kill -9 $$']);
      assert.equal(killed.exitCode, 137);
      const terminated = await server.exec(w.id, ['sh', '-c', 'kill -TERM $$']);
      assert.equal(terminated.exitCode, 143);
      // A background process that keeps the output pipe open does not hold the exec.
      const started = Date.now();
      const bg = await server.exec(w.id, ['sh', '-c', 'sleep 60 & echo started']);
      assert.equal(bg.stdout, 'started\n');
      assert.ok(Date.now() - started < 10_000);
      // A program name containing '=' is still a program, not an environment assignment.
      const eq = await server.exec(w.id, ['sh', '-c', 'printf "#!/bin/sh\\necho ran\\n" > /tmp/a=b; chmod +x /tmp/a=b']);
      assert.equal(eq.exitCode, 0);
      assert.equal((await server.exec(w.id, ['/tmp/a=b'])).stdout, 'ran\n');
    });

    it('reads and writes files inside the workspace only, and shows the git diff', async () => {
      const w = await server.createWorkshop({ repo });
      const put = await server.api('PUT', `/v1/workshops/${w.id}/files?path=notes/plan.txt`, Buffer.from('first line\n'));
      assert.equal(put.status, 200, JSON.stringify(put.body));
      const get = await fetch(`${server.url}/v1/workshops/${w.id}/files?path=notes/plan.txt`, {
        headers: { authorization: `Bearer ${server.token}` },
      });
      assert.equal(await get.text(), 'first line\n');
      await server.api('PUT', `/v1/workshops/${w.id}/files?path=README.md`, Buffer.from('# changed\n'));

      const diff = await server.api<{ diff: string; untracked: string[] }>('GET', `/v1/workshops/${w.id}/git/diff`);
      assert.equal(diff.status, 200);
      assert.match(diff.body.diff, /-# demo\n\+# changed/);
      assert.deepEqual(diff.body.untracked, ['notes/plan.txt']);

      for (const path of ['../etc/passwd', '/etc/passwd', '/workspace/../etc/hostname']) {
        const r = await server.api<{ code: string }>('GET', `/v1/workshops/${w.id}/files?path=${encodeURIComponent(path)}`);
        assert.equal(r.status, 403, path);
        assert.equal(r.body.code, 'PERMISSION_DENIED');
      }
      // A symlink planted in the workspace cannot lead a read or a write outside it.
      await server.exec(w.id, ['ln', '-s', '/etc', 'escape']);
      const viaLink = await server.api<{ code: string }>('GET', `/v1/workshops/${w.id}/files?path=escape/hostname`);
      assert.equal(viaLink.status, 403);
      const writeLink = await server.api<{ code: string }>('PUT', `/v1/workshops/${w.id}/files?path=escape/evil`, Buffer.from('x'));
      assert.equal(writeLink.status, 403);
      const absent = await server.api<{ code: string }>('GET', `/v1/workshops/${w.id}/files?path=nope.txt`);
      assert.equal(absent.status, 404);
      const noPath = await server.api<{ code: string; details: { field: string } }>('GET', `/v1/workshops/${w.id}/files`);
      assert.equal(noPath.status, 400);
      assert.equal(noPath.body.details.field, 'path');
    });

    it('suspends and resumes a workshop with its processes, memory and files intact', async () => {
      const w = await server.createWorkshop({ repo });
      await server.exec(w.id, [
        'sh',
        '-c',
        'echo kept > state.txt; (i=0; while true; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.05; done) >/dev/null 2>&1 & echo $! > /tmp/loop.pid',
      ]);
      const pidBefore = (await server.exec(w.id, ['cat', '/tmp/loop.pid'])).stdout;

      const stop = await server.cli(['workshops', 'stop', w.id, '-o', 'json']);
      assert.equal(stop.code, 0, stop.stderr);
      assert.equal((JSON.parse(stop.stdout) as W).status, 'Suspended');

      const refused = await server.api<{ code: string; message: string }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['true'] });
      assert.equal(refused.status, 409);
      assert.equal(refused.body.code, 'WORKSHOP_SUSPENDED');
      assert.match(refused.body.message, /atelier workshops resume/);
      const cliRefused = await server.cli(['exec', w.id, '--', 'true']);
      assert.equal(cliRefused.code, 1);
      assert.match(cliRefused.stderr, /resume/);

      // Execs racing a stop either run (frozen with the workshop if still running, finishing
      // after the resume) or are refused as suspended; none fails or is lost.
      await server.api('POST', `/v1/workshops/${w.id}/resume`);
      const racing = Array.from({ length: 6 }, () =>
        server.api<{ exitCode?: number; code?: string }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['true'] }),
      );
      const raced = await server.api<{ status: string }>('POST', `/v1/workshops/${w.id}/stop`);
      assert.equal(raced.body.status, 'Suspended');
      await server.api('POST', `/v1/workshops/${w.id}/resume`);
      for (const r of await Promise.all(racing)) {
        assert.ok(
          (r.status === 200 && r.body.exitCode === 0) || (r.status === 409 && r.body.code === 'WORKSHOP_SUSPENDED'),
          JSON.stringify(r),
        );
      }
      await server.api('POST', `/v1/workshops/${w.id}/stop`);

      const resume = await server.cli(['workshops', 'resume', w.id, '-o', 'json']);
      assert.equal((JSON.parse(resume.stdout) as W).status, 'Running');
      const after = await server.exec(w.id, ['sh', '-c', 'cat /tmp/loop.pid; cat state.txt; kill -0 $(cat /tmp/loop.pid) && echo alive']);
      assert.equal(after.stdout, `${pidBefore}kept\nalive\n`);
    });

    it('deletes a workshop with its processes, cgroups and files', async () => {
      const w = await server.createWorkshop({ repo });
      await server.exec(w.id, ['sh', '-c', 'sleep 1000 >/dev/null 2>&1 &']);
      // A tree deeper than PATH_MAX and a read-only directory do not stop the delete.
      const deep = await server.exec(w.id, ['sh', '-c', HARD_TO_DELETE]);
      assert.equal(deep.exitCode, 0, deep.stderr);
      const root = join(sandboxes(), 'workshops', w.id);
      assert.ok(existsSync(root));
      const del = await server.cli(['workshops', 'delete', w.id]);
      assert.equal(del.code, 0, del.stderr);
      assert.ok(!existsSync(root));
      assert.deepEqual(cgroupDirs(w.id), []);
      assert.equal(processesNaming(root), 0);
      const gone = await server.api<{ code: string }>('GET', `/v1/workshops/${w.id}`);
      assert.equal(gone.status, 404);
      assert.equal(gone.body.code, 'WORKSHOP_NOT_FOUND');
      const again = await server.cli(['workshops', 'delete', w.id]);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /does not exist/);
    });

    it("never lets the repository's environment reach the privileged side of exec", async () => {
      // A hostile repository: its PATH puts a fake setpriv (and nsenter) first, LD_PRELOAD too.
      const fake = '#!/bin/sh\necho "$(id -u)" > /workspace/.pwned\nexec /usr/bin/$(basename "$0") "$@"\n';
      const hostile = makeRepo({
        '.bin/setpriv': fake,
        '.bin/nsenter': fake,
        '.bin/env': fake,
        '.devcontainer.json': JSON.stringify({
          containerEnv: { PATH: '/workspace/.bin:${containerEnv:PATH}', LD_PRELOAD: '/workspace/nothing.so' },
          postCreateCommand: 'true',
        }),
      });
      execFileSync('chmod', ['+x', join(hostile, '.bin/setpriv'), join(hostile, '.bin/nsenter'), join(hostile, '.bin/env')]);
      execFileSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', 'commit', '-qam', 'modes'], { cwd: hostile });
      const w = await server.createWorkshop({ repo: hostile });
      assert.equal(w.status, 'Running', w.statusReason ?? '');
      const r = await server.exec(w.id, ['sh', '-c', 'echo "$PATH"; [ -e /workspace/.pwned ] && echo PWNED; id -u']);
      const [path, ...rest] = r.stdout.trim().split('\n');
      // ${containerEnv:PATH} expands to the workshop's default PATH (the installed PostgreSQL's
      // own bin first: psql without Debian's wrapper).
      assert.match(
        path!,
        /^\/workspace\/\.bin:\/usr\/lib\/postgresql\/\d+\/bin:\/usr\/local\/sbin:\/usr\/local\/bin:\/usr\/sbin:\/usr\/bin:\/sbin:\/bin$/,
      );
      const psql = await server.exec(w.id, ['sh', '-c', 'PATH=$(printenv PATH | cut -d: -f2-) command -v psql']);
      assert.match(psql.stdout, /^\/usr\/lib\/postgresql\/\d+\/bin\/psql\n$/, 'psql is the client itself, not the wrapper');
      assert.deepEqual(rest.length, 1, r.stdout);
      assert.notEqual(rest[0], '0');
    });

    it('honours devcontainer.json and reports what it ignores', async () => {
      const devRepo = makeRepo({
        '.devcontainer/devcontainer.json': `{
          // comments and trailing commas are allowed
          "image": "mcr.microsoft.com/devcontainers/base",
          "containerEnv": { "APP_MODE": "test" },
          "remoteEnv": { "APP_URL": "http://localhost/\${containerEnv:APP_MODE}" },
          "postCreateCommand": "echo created > .made-by-post-create",
          "forwardPorts": [3000, "db:5432"],
        }`,
      });
      const w = (await server.createWorkshop({ repo: devRepo })) as unknown as W;
      assert.equal(w.status, 'Running', w.statusReason ?? '');
      assert.deepEqual(w.forwardPorts, [3000, 5432]);
      assert.ok(w.warnings.some((x) => x.includes('"image"')));
      const r = await server.exec(w.id, ['sh', '-c', 'echo $APP_MODE $APP_URL; cat .made-by-post-create']);
      assert.equal(r.stdout, 'test http://localhost/test\ncreated\n');

      const failing = makeRepo({ '.devcontainer.json': '{ "postCreateCommand": ["sh", "-c", "echo broken >&2; exit 3"] }' });
      const f = await server.createWorkshop({ repo: failing });
      assert.equal(f.status, 'Failed');
      assert.match(f.statusReason ?? '', /postCreateCommand exited with code 3: broken/);
      const execFailed = await server.api<{ code: string }>('POST', `/v1/workshops/${f.id}/exec`, { command: ['true'] });
      assert.equal(execFailed.body.code, 'WORKSHOP_NOT_RUNNING');
      await server.api('DELETE', `/v1/workshops/${f.id}`);
      assert.ok(!existsSync(join(sandboxes(), 'workshops', f.id)));
    });

    it('marks a workshop whose clone fails as Failed with the reason; delete leaves nothing', async () => {
      // Nothing listens on port 1 of the loopback: the clone fails after the workshop exists.
      const w = await server.createWorkshop({ repo: 'https://127.0.0.1:1/org/repo.git' });
      assert.equal(w.status, 'Failed');
      assert.match(w.statusReason ?? '', /cloning https:\/\/127\.0\.0\.1:1\/org\/repo\.git failed/);
      const del = await server.api('DELETE', `/v1/workshops/${w.id}`);
      assert.equal(del.status, 200);
      assert.ok(!existsSync(join(sandboxes(), 'workshops', w.id)));
      assert.deepEqual(cgroupDirs(w.id), []);
    });

    it('refuses bad input with a clear error and creates nothing', async () => {
      const before = (await server.api<{ items: W[] }>('GET', '/v1/workshops')).body.items.length;
      const cases: [Record<string, unknown> | string, number, string, RegExp][] = [
        [{ repo: 'ftp://example.com/x.git' }, 422, 'REPO_REFUSED', /scheme/],
        [{ repo: 'http://example.com/x.git' }, 422, 'REPO_REFUSED', /scheme/],
        [{ repo: '/tmp/does-not-exist-atelier' }, 422, 'REPO_NOT_FOUND', /does not exist/],
        [{ repo: '/usr/share' }, 422, 'REPO_REFUSED', /outside the directories/],
        [{ repo: 'relative/path' }, 422, 'REPO_REFUSED', /relative/],
        [{ repo: '--upload-pack=evil' }, 422, 'REPO_REFUSED', /starts with/],
        [{ repo, memory: '1t' }, 400, 'INVALID_ARGUMENT', /more than this host has/],
        [{ repo, memory: 'lots' }, 400, 'INVALID_ARGUMENT', /not a size/],
        [{ repo, cpus: 0 }, 400, 'INVALID_ARGUMENT', /cpus/],
        [{ repo, cpus: 4096 }, 400, 'INVALID_ARGUMENT', /cpus/],
        [{ repo, pids: 1 }, 400, 'INVALID_ARGUMENT', /pids/],
        [{ repo, name: 'Bad Name!' }, 400, 'INVALID_ARGUMENT', /name/],
        [{ repo, colour: 'blue' }, 400, 'INVALID_ARGUMENT', /colour|unrecognized/i],
        [{}, 400, 'INVALID_ARGUMENT', /repo/],
        ['{not json', 400, 'INVALID_ARGUMENT', /bad request/],
      ];
      for (const [body, status, code, message] of cases) {
        const r = await server.api<{ code: string; message: string; requestId: string }>('POST', '/v1/workshops', body);
        assert.equal(r.status, status, JSON.stringify(body));
        assert.equal(r.body.code, code, JSON.stringify(body));
        assert.match(r.body.message, message);
        assert.match(r.body.requestId, /^req-/);
      }
      const plain = join(makeRepo(), 'plain');
      mkdirSync(plain);
      const ng = await server.api<{ code: string; message: string }>('POST', '/v1/workshops', { repo: plain });
      assert.equal(ng.status, 422);
      assert.match(ng.body.message, /not a git repository/);
      const dup = await server.api<{ code: string }>('POST', '/v1/workshops', { repo, name: `dup-${mode}` });
      assert.equal(dup.status, 201);
      const dup2 = await server.api<{ code: string; details: { field: string } }>('POST', '/v1/workshops', { repo, name: `dup-${mode}` });
      assert.equal(dup2.status, 409);
      assert.equal(dup2.body.code, 'ALREADY_EXISTS');

      for (const id of ['ws-00000000', 'nonsense', '../../etc']) {
        const r = await server.api<{ code: string }>('POST', `/v1/workshops/${encodeURIComponent(id)}/exec`, { command: ['true'] });
        assert.equal(r.status, 404, id);
      }
      const emptyCmd = await server.api<{ code: string; details: { field: string } }>('POST', `/v1/workshops/ws-00000000/exec`, {
        command: [],
      });
      assert.equal(emptyCmd.status, 400);
      assert.equal(emptyCmd.body.details.field, 'command');
      const anon = await fetch(`${server.url}/v1/workshops`);
      assert.equal(anon.status, 401);
      // Authentication follows the route the router matched, not the raw URL.
      for (const path of ['/%761/workshops', '/v1/%77orkshops', '/V1/workshops']) {
        const r = await fetch(`${server.url}${path}`);
        assert.ok(r.status === 401 || r.status === 404, `${path} → ${r.status}`);
      }
      const w = await server.createWorkshop({ repo });
      const twoPaths = await server.api<{ code: string }>('GET', `/v1/workshops/${w.id}/files?path=a&path=b`);
      assert.equal(twoPaths.status, 400);
      const nul = await server.api<{ details: { field: string } }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['echo', 'a\u0000b'] });
      assert.equal(nul.status, 400);
      assert.equal(nul.body.details.field, 'command.1');
      const huge = await server.api<{ code: string }>('POST', `/v1/workshops/${w.id}/exec`, { command: ['echo', 'x'.repeat(200_000)] });
      assert.equal(huge.status, 400);
      const wrong = await fetch(`${server.url}/v1/workshops`, { headers: { authorization: 'Bearer atl_wrong' } });
      assert.equal(wrong.status, 401);
      const after = (await server.api<{ items: W[] }>('GET', '/v1/workshops')).body.items;
      // Only the deliberate successes (the first of the duplicates, the one for exec input) were added.
      assert.equal(after.length, before + 2);
    });

    it('serves health and Prometheus metrics', async () => {
      const h = await fetch(`${server.url}/healthz`);
      assert.equal(h.status, 200);
      const m = await (await fetch(`${server.url}/metrics`)).text();
      assert.match(m, /atelier_http_requests_total/);
      assert.match(m, /atelier_workshops\{status="Running"\}/);
    });
  });
}

function cgroupDirs(id: string): string[] {
  const found: string[] = [];
  const walk = (dir: string, depth: number): void => {
    if (depth > 6) return;
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      return;
    }
    for (const e of entries) {
      if (e === id) found.push(join(dir, e));
      else if (!e.includes('.')) walk(join(dir, e), depth + 1);
    }
  };
  for (const c of ['memory', 'cpu', 'pids', 'freezer']) walk(join('/sys/fs/cgroup', c), 0);
  return found;
}
