import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cachedRelease, hostTarget, livePid, removeHostInstall, runGetSh, runProcess, serveDir } from './helpers/release.js';
import { REPO_ROOT } from './helpers/server.js';

// The host install as a new user runs it, on this machine: a release tarball (npm run release,
// cached in .cache/host-release) served by a local HTTP server, scripts/get.sh pointed at it, and
// everything installed under a temporary prefix (its /opt, /etc, /var, /run) instead of /.
// This machine's PID 1 is not systemd: the service is Atelier's supervisor.

const VERSION = '0.0.0-test';
const mode = (p: string): number => statSync(p).mode & 0o777;

describe('host install from a release tarball (bootstrap, install, supervisor, uninstall)', () => {
  let release: string;
  let site: Awaited<ReturnType<typeof serveDir>>;
  let prefix: string;
  let home: string;
  let listen: string;
  let env: NodeJS.ProcessEnv;
  const dataDir = (): string => join(prefix, 'var/lib/atelier');
  const atelier = (): string => join(prefix, 'usr/local/bin/atelier');
  const url = (): string => `http://${listen}`;
  const cli = (args: string[], extra: NodeJS.ProcessEnv = {}) => runProcess(atelier(), args, { ...env, ...extra });
  const healthz = async (): Promise<{ status: string; version: string } | undefined> =>
    fetch(`${url()}/healthz`).then(
      (r) => r.json() as Promise<{ status: string; version: string }>,
      () => undefined,
    );
  const token = (): string => /^token: (atl_\S+)/m.exec(readFileSync(join(dataDir(), 'credentials.txt'), 'utf8'))![1]!;
  const api = async (path: string): Promise<{ items: { id: string; status: string }[] }> => {
    const r = await fetch(`${url()}${path}`, { headers: { authorization: `Bearer ${token()}` } });
    assert.equal(r.status, 200);
    return (await r.json()) as { items: { id: string; status: string }[] };
  };
  let workshopId = '';

  before(async () => {
    release = cachedRelease(VERSION);
    site = await serveDir(release);
    ({ prefix, home, listen, env } = await hostTarget('host', site.url));
  });

  after(async () => {
    await removeHostInstall({ prefix, home, env });
    await site[Symbol.asyncDispose]();
  });

  it('refuses a tarball whose checksum does not match, installing nothing', async () => {
    const bad = mkdtempSync('/tmp/atelier-host-bad-');
    try {
      const name = `atelier-${VERSION}-linux-x64.tar.gz`;
      symlinkSync(join(release, name), join(bad, name));
      writeFileSync(join(bad, `${name}.sha256`), `${'0'.repeat(64)}  ${name}\n`);
      writeFileSync(join(bad, 'LATEST'), `${VERSION}\n`);
      const r = await runGetSh(['--yes'], { ...env, ATELIER_RELEASE_URL: bad });
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /checksum mismatch for atelier-0\.0\.0-test-linux-x64\.tar\.gz.*nothing was installed/);
      assert.equal(existsSync(join(prefix, 'opt/atelier')), false);
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });

  it('stops at a failing step, names it, and undoes that step only', async () => {
    // PostgreSQL binaries whose initdb fails: the database step fails after the steps before it.
    const fake = mkdtempSync('/tmp/atelier-host-pgbin-');
    try {
      for (const b of ['postgres', 'initdb', 'pg_ctl'])
        writeFileSync(join(fake, b), '#!/bin/sh\necho "initdb: this disk is on fire" >&2\nexit 1\n', { mode: 0o755 });
      const r = await runGetSh(['--listen', listen, '--yes'], { ...env, ATELIER_PG_BIN_DIR: fake });
      assert.notEqual(r.code, 0, r.stderr);
      assert.match(r.stderr, /step 5\/7 "database" failed/, r.stderr);
      assert.match(r.stderr, /\[5\/7\] database: undone/);
      assert.equal(existsSync(join(dataDir(), 'pg')), false, 'the half-made cluster is removed');
      assert.equal(existsSync(join(prefix, 'run/atelier/supervisor.pid')), false, 'no service was started');
      assert.equal(mode(join(prefix, 'etc/atelier/master.key')), 0o600, 'the steps before stay applied');
      const journal = readFileSync(join(prefix, 'opt/atelier/install-journal.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { step: string; outcome: string });
      assert.deepEqual(
        journal.filter((e) => e.step === 'database').map((e) => e.outcome),
        ['applying', 'failed', 'undone'],
      );
    } finally {
      rmSync(fake, { recursive: true, force: true });
    }
  });

  it('bootstraps: downloads, verifies, unpacks, installs, and the server answers', async () => {
    const r = await runGetSh(['--listen', listen, '--yes'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /\[4\/7\] secrets: no change/, 'the key made by the failed run is kept');
    assert.match(r.stderr, /\[5\/7\] database: applied/);
    assert.match(r.stderr, /\[6\/7\] service: applied/);
    assert.match(r.stderr, new RegExp(`Atelier ${VERSION.replace(/\./g, '\\.')} is installed and running at ${url()}`));
    assert.deepEqual((await healthz())?.version, VERSION);
    // Nothing fetched but the release's three files.
    assert.deepEqual(
      [...new Set(site.requests)].sort(),
      ['LATEST', `atelier-${VERSION}-linux-x64.tar.gz`, `atelier-${VERSION}-linux-x64.tar.gz.sha256`].sort(),
    );
    assert.equal(mode(join(dataDir(), 'credentials.txt')), 0o600);
    assert.match(readFileSync(join(dataDir(), 'credentials.txt'), 'utf8'), new RegExp(`^url: ${url()}`, 'm'));
    assert.equal(mode(join(prefix, 'etc/atelier/atelier.env')), 0o640);
    assert.equal(mode(dataDir()), 0o711);
    assert.equal(readFileSync(join(prefix, 'opt/atelier/current/RELEASE.json'), 'utf8').includes(`"version": "${VERSION}"`), true);
    // The server serves the bootstrap itself.
    const script = await fetch(`${url()}/install.sh`);
    assert.equal(script.status, 200);
    assert.equal(await script.text(), readFileSync(join(REPO_ROOT, 'scripts/get.sh'), 'utf8'));
  });

  it('a second install changes nothing and says so; --plan shows every step', async () => {
    const again = await cli(['server', 'install', '--prefix', prefix, '--output', 'json']);
    assert.equal(again.code, 0, again.stderr);
    const events = again.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; state?: string; step?: string; changed?: number; message?: string });
    assert.deepEqual(
      events.filter((e) => e.event === 'step').map((e) => `${e.step}:${e.state}`),
      ['release', 'directories', 'configuration', 'secrets', 'database', 'service', 'credentials'].map((s) => `${s}:unchanged`),
    );
    assert.equal(events.at(-1)?.changed, 0);
    assert.match(events.at(-1)?.message ?? '', /^no change/);

    const plan = await cli(['server', 'install', '--prefix', prefix, '--plan', '--listen', '127.0.0.1:1']);
    assert.equal(plan.code, 0, plan.stderr);
    assert.match(plan.stderr, /\[3\/7\] configuration: planned/);
    assert.match(plan.stderr, /ATELIER_LISTEN/);
    assert.match(plan.stderr, /plan only: nothing was changed/);
    assert.match(readFileSync(join(prefix, 'etc/atelier/atelier.env'), 'utf8'), new RegExp(`ATELIER_LISTEN=${listen}`));
  });

  it('a workshop is created and used through the installed CLI', async () => {
    const repo = join(home, 'repo');
    mkdirSync(repo);
    writeFileSync(join(repo, 'README.md'), '# hello from the host test\n');
    const git = (...args: string[]) =>
      execFileSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', ...args], { cwd: repo, stdio: 'ignore' });
    git('init', '-q', '-b', 'main');
    git('add', '-A');
    git('commit', '-qm', 'initial');
    const as = { ATELIER_URL: url(), ATELIER_TOKEN: token() };
    const created = await cli(['workshops', 'create', '--repo', repo, '--output', 'json'], as);
    assert.equal(created.code, 0, created.stderr);
    workshopId = (JSON.parse(created.stdout) as { id: string }).id;
    const out = await cli(['exec', workshopId, '--', 'cat', 'README.md'], as);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, /hello from the host test/);
  });

  it('the supervisor restarts a server that was killed', async () => {
    const pidFile = join(dataDir(), 'server.pid');
    const first = livePid(pidFile);
    assert.ok(first, 'the server holds its pid file');
    process.kill(first, 'SIGKILL');
    const deadline = Date.now() + 90_000;
    for (;;) {
      const now = livePid(pidFile);
      if (now !== undefined && now !== first && (await healthz())?.status === 'ok') break;
      assert.ok(
        Date.now() < deadline,
        `no new healthy server; log:\n${readFileSync(join(prefix, 'var/log/atelier/server.log'), 'utf8').slice(-3000)}`,
      );
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.match(
      readFileSync(join(prefix, 'var/log/atelier/server.log'), 'utf8'),
      /supervisor: server exited \(SIGKILL\); restarting in 1 s/,
    );
    assert.deepEqual(
      (await api('/v1/workshops')).items.map((w) => w.id),
      [workshopId],
    );
  });

  it('uninstall keeps the data; installing again finds it', async () => {
    const supervisor = livePid(join(prefix, 'run/atelier/supervisor.pid'));
    const r = await cli(['server', 'uninstall', '--prefix', prefix]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /Atelier is uninstalled\. Kept: /);
    assert.equal(supervisor !== undefined && existsSync(`/proc/${supervisor}`), false, 'the supervisor is gone');
    assert.equal(await healthz(), undefined, 'nothing answers');
    assert.equal(existsSync(atelier()), false);
    assert.equal(existsSync(join(prefix, 'opt/atelier/releases')), false);
    assert.equal(existsSync(join(prefix, 'etc/atelier/atelier.env')), false);
    assert.equal(existsSync(join(dataDir(), 'pg', 'PG_VERSION')), true);
    assert.equal(existsSync(join(prefix, 'etc/atelier/master.key')), true);

    const again = await runGetSh(['--listen', listen, '--yes'], env);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /\[4\/7\] secrets: no change/);
    assert.match(again.stderr, /\[5\/7\] database: no change/);
    assert.deepEqual(
      (await api('/v1/workshops')).items.map((w) => w.id),
      [workshopId],
    );
  });

  it('uninstall --purge asks for --yes, then deletes the workshops and every file', async () => {
    const refused = await cli(['server', 'uninstall', '--prefix', prefix, '--purge']);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /add --yes to confirm/);
    assert.equal((await healthz())?.status, 'ok', 'nothing was touched');

    const r = await cli(['server', 'uninstall', '--prefix', prefix, '--purge', '--yes']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`deleting workshop ${workshopId}`));
    for (const p of ['opt/atelier', 'etc/atelier', 'var/lib/atelier', 'var/log/atelier', 'run/atelier', 'usr/local/bin/atelier'])
      assert.equal(existsSync(join(prefix, p)), false, `${p} is gone`);
    const left = execFileSync('sh', ['-c', `ps -eo args | grep -F -- ${prefix} | grep -v grep || true`], { encoding: 'utf8' });
    assert.equal(left.trim(), '', 'no process runs from the prefix');
  });
});
