import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cachedRelease, derivedReleases, hostTarget, removeHostInstall, runGetSh, runProcess, serveDir } from './helpers/release.js';

// `atelier server upgrade` on an installed host (temporary prefix, supervisor service): to a second
// release that carries a migration (made in the test from the first: a throwaway migration, never
// in src/), then to a broken one (its migration fails, so its server never becomes healthy), which
// is rolled back by itself, then `upgrade --rollback`. A workshop and an agent session started
// before the upgrades are still there, the session still running, after each of them.

const V0 = '0.0.0-test';
const V1 = '0.0.1-test';
const V2 = '0.0.2-test';

describe('host upgrade: migration, automatic rollback of a broken release, --rollback', () => {
  let prefix: string;
  let home: string;
  let listen: string;
  let env: NodeJS.ProcessEnv;
  let site: Awaited<ReturnType<typeof serveDir>>;
  let r1: string;
  let r2: string;
  let workshopId = '';
  let sessionStarted = '';
  const dataDir = (): string => join(prefix, 'var/lib/atelier');
  const atelier = (): string => join(prefix, 'usr/local/bin/atelier');
  const url = (): string => `http://${listen}`;
  const cli = (args: string[]) => runProcess(atelier(), args, env);
  const token = (): string => /^token: (atl_\S+)/m.exec(readFileSync(join(dataDir(), 'credentials.txt'), 'utf8'))![1]!;
  const api = async <T>(path: string, init: RequestInit = {}): Promise<T> => {
    const r = await fetch(`${url()}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${token()}`, 'content-type': 'application/json' },
    });
    assert.ok(r.ok, `${path}: ${r.status} ${await r.clone().text()}`);
    return (await r.json()) as T;
  };
  const version = async (): Promise<string | undefined> =>
    fetch(`${url()}/healthz`).then(
      async (r) => ((await r.json()) as { version: string }).version,
      () => undefined,
    );
  const migrations = (): string[] =>
    execFileSync(
      'psql',
      [
        '-At',
        '-d',
        `postgresql://atelier@/atelier?host=${encodeURIComponent(join(dataDir(), 'pgsock'))}`,
        '-c',
        'SELECT version FROM schema_migrations ORDER BY 1',
      ],
      {
        encoding: 'utf8',
      },
    )
      .trim()
      .split('\n');
  /** The workshop is still listed and its session is the same one, still running. */
  const workshopSurvived = async (): Promise<void> => {
    const ws = await api<{ items: { id: string }[] }>('/v1/workshops');
    assert.deepEqual(
      ws.items.map((w) => w.id),
      [workshopId],
    );
    const sessions = await api<{ items: { name: string; running: boolean; startedAt: string }[] }>(`/v1/workshops/${workshopId}/sessions`);
    assert.deepEqual(
      sessions.items.map((s) => [s.name, s.running, s.startedAt]),
      [['agent', true, sessionStarted]],
    );
  };

  before(async () => {
    const r0 = cachedRelease(V0);
    // 0.0.1 adds a migration; 0.0.2 adds another, then its server fails right after migrating
    // (so the database was changed and must be put back).
    [r1, r2] = derivedReleases(r0, 'upgrade', [
      {
        version: V1,
        change: (root) =>
          writeFileSync(
            join(root, 'dist/db/migrations/900_host_upgrade_probe.sql'),
            'CREATE TABLE host_upgrade_probe (id int PRIMARY KEY);\n',
          ),
      },
      {
        version: V2,
        change: (root) => {
          writeFileSync(join(root, 'dist/db/migrations/901_host_upgrade_broken.sql'), 'CREATE TABLE host_upgrade_broken (id int);\n');
          const start = join(root, 'dist/server/start.js');
          const js = readFileSync(start, 'utf8');
          assert.ok(js.includes('await migrate(pool);'), 'the server migrates at start');
          writeFileSync(
            start,
            js.replace('await migrate(pool);', "await migrate(pool); throw new Error('a deliberately broken release');"),
          );
        },
      },
    ]) as [string, string];
    site = await serveDir(r0);
    ({ prefix, home, listen, env } = await hostTarget('host-up', site.url));
    const installed = await runGetSh(['--listen', listen, '--yes'], env);
    assert.equal(installed.code, 0, installed.stderr);

    const repo = join(home, 'repo');
    mkdirSync(repo);
    writeFileSync(join(repo, 'README.md'), '# upgrade\n');
    const git = (...args: string[]) =>
      execFileSync('git', ['-c', 'user.email=t@example.com', '-c', 'user.name=t', ...args], { cwd: repo, stdio: 'ignore' });
    git('init', '-q', '-b', 'main');
    git('add', '-A');
    git('commit', '-qm', 'initial');
    workshopId = (await api<{ id: string }>('/v1/workshops', { method: 'POST', body: JSON.stringify({ repo }) })).id;
    const s = await api<{ startedAt: string }>(`/v1/workshops/${workshopId}/sessions`, {
      method: 'POST',
      body: JSON.stringify({ name: 'agent', command: ['sleep', '3600'] }),
    });
    sessionStarted = s.startedAt;
  });

  after(async () => {
    await removeHostInstall({ prefix, home, env });
    await site?.[Symbol.asyncDispose]();
  });

  it('upgrades to a release with a migration: backup, migrated, workshop and session kept', async () => {
    const tarball = join(r1, `atelier-${V1}-linux-x64.tar.gz`);
    const r = await cli(['server', 'upgrade', '--prefix', prefix, '--release', tarball, '--output', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const events = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; step?: string; state?: string; done?: number; total?: number; message?: string });
    assert.deepEqual(
      events.filter((e) => e.event === 'step' && e.state === 'applied').map((e) => e.step),
      ['verify', 'unpack', 'backup', 'stop', 'start', 'health'],
    );
    assert.match(events.at(-1)?.message ?? '', new RegExp(`upgraded: Atelier ${V1}`));
    // The steps that measure themselves: the download (hashed on the way) and the unpack in bytes
    // of the tarball, the backup in bytes against the database's size; each ends at its total.
    const progress = (step: string) => events.filter((e) => e.event === 'progress' && e.step === step);
    for (const step of ['verify', 'unpack']) {
      const p = progress(step);
      assert.ok(p.length >= 1, `progress events for ${step}`);
      assert.ok(p.every((e) => e.total === statSync(tarball).size && e.done! <= e.total));
      assert.equal(p.at(-1)!.done, statSync(tarball).size);
      // Each before its step's "applied".
      assert.ok(events.indexOf(p.at(-1)!) < events.findIndex((e) => e.step === step && e.state === 'applied'));
    }
    const backup = progress('backup');
    assert.ok(backup.length >= 1 && backup.at(-1)!.total! > 0 && backup.at(-1)!.done === backup.at(-1)!.total, JSON.stringify(backup));
    assert.equal(await version(), V1);
    assert.equal(readlinkSync(join(prefix, 'opt/atelier/current')), `releases/${V1}`);
    assert.ok(existsSync(join(prefix, 'opt/atelier/releases', V0, 'RELEASE.json')), 'the previous release stays beside');
    assert.ok(migrations().includes('900_host_upgrade_probe.sql'));
    assert.equal(readdirSync(join(dataDir(), 'backups')).filter((f) => f.startsWith(`pre-upgrade-${V0}-to-${V1}-`)).length, 1);
    await workshopSurvived();
  });

  it('a broken release is rolled back by itself, with the database as it was', async () => {
    // By URL this time (the folder holding LATEST, as get.sh takes it).
    await using site2 = await serveDir(r2);
    const r = await cli(['server', 'upgrade', '--prefix', prefix, '--release', site2.url]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`upgrade to ${V2} failed, rolled back: Atelier ${V1} runs again`));
    assert.match(r.stderr, /the server exited while starting/);
    assert.match(r.stderr, /a deliberately broken release/);
    assert.match(r.stderr, /^\[0\] restore: applied \(\d+\.\d s\) — the database as backed up in \S+pre-upgrade-/m);
    assert.equal(await version(), V1);
    assert.equal(readlinkSync(join(prefix, 'opt/atelier/current')), `releases/${V1}`);
    const m = migrations();
    assert.ok(m.includes('900_host_upgrade_probe.sql'));
    assert.ok(!m.includes('901_host_upgrade_broken.sql'), 'the database is back as it was before the upgrade');
    await workshopSurvived();
  });

  it('upgrade --rollback returns to the release before the last upgrade', async () => {
    const r = await cli(['server', 'upgrade', '--prefix', prefix, '--rollback']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`rolled back: Atelier ${V0} runs`));
    assert.equal(await version(), V0);
    await workshopSurvived();
  });
});
