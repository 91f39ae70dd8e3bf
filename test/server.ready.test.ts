import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, TestServer, killStrays, runCli } from './helpers/server.js';
import { freePort } from './terminals.helpers.js';

/** The CLI config a server wrote: its contexts (name → url) and the current one. */
function contexts(configDir: string): { current: string | undefined; urls: Map<string, string> } {
  const yaml = readFileSync(join(configDir, 'config.yaml'), 'utf8');
  const urls = new Map<string, string>();
  for (const m of yaml.matchAll(/- name: (\S+)\n\s+url: (\S+)/g)) urls.set(m[1]!, m[2]!);
  return { current: /^current-context: (\S+)$/m.exec(yaml)?.[1], urls };
}

describe('a starting server', () => {
  it('answers 503 "starting" until every route can be served and the CLI context is written; then 200', async (t) => {
    const dir = mkdtempSync('/tmp/atelier-test-');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const configDir = join(dir, 'config');
    const proc = spawn(
      process.execPath,
      [BIN, 'server', 'start', '--data-dir', dir, '--listen', `127.0.0.1:${port}`, '--allow-repo-root', '/tmp'],
      {
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          ATELIER_CONFIG_DIR: configDir,
          ATELIER_LOG_LEVEL: 'warn',
          ATELIER_SIMULATORS_WARM: '0',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let log = '';
    proc.stdout!.on('data', (c: Buffer) => (log += c.toString()));
    proc.stderr!.on('data', (c: Buffer) => (log += c.toString()));
    t.after(async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await exited;
      }
      killStrays(dir);
      rmSync(dir, { recursive: true, force: true });
    });

    const starting: { status: number; body: { status?: string; code?: string }; retryAfter: string | null }[] = [];
    const deadline = Date.now() + 60_000;
    for (;;) {
      assert.ok(proc.exitCode === null, `the server exited:\n${log}`);
      assert.ok(Date.now() < deadline, `/healthz never answered 200:\n${log}`);
      const res = await fetch(`${url}/healthz`).catch(() => undefined);
      if (res?.status === 200) break;
      if (res)
        starting.push({ status: res.status, body: (await res.json()) as { status?: string }, retryAfter: res.headers.get('retry-after') });
      await new Promise((r) => setTimeout(r, 2));
    }
    // The first 200: everything a new user does next works at once.
    const c = contexts(configDir);
    assert.equal(c.current, 'local', 'the CLI context is written before /healthz says ok');
    assert.equal(c.urls.get('local'), url);
    const device = await fetch(`${url}/v1/auth/device/code`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'client_id=atelier-cli&scope=openid',
    });
    assert.equal(device.status, 200, await device.clone().text());
    const forged = await fetch(`${url}/v1/workshops`, { headers: { authorization: 'Bearer atl_v1forgedforgedforgedforged' } });
    assert.equal(forged.status, 401);
    const list = await runCli(['workshops', 'list'], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: configDir },
    });
    assert.equal(list.code, 0, list.stderr);
    // Whatever answered before said why, and when to ask again.
    for (const s of starting) {
      assert.equal(s.status, 503);
      assert.deepEqual([s.body.status, s.body.code, s.retryAfter], ['starting', 'UNAVAILABLE', '1']);
    }
  });
});

describe('a second server on a machine whose CLI already has a context', () => {
  const servers: TestServer[] = [];
  after(async () => {
    for (const s of servers) await s.dispose();
  });

  it("adds a context of its own and says so, never repointing the other server's; each follows its own server", async () => {
    const a = await TestServer.start();
    servers.push(a);
    const b = new TestServer(mkdtempSync('/tmp/atelier-test-'), ['--allow-repo-root', '/tmp']);
    servers.push(b);
    b.serverEnv = { ATELIER_CONFIG_DIR: a.configDir };
    await b.boot();
    let c = contexts(a.configDir);
    assert.equal(c.current, 'local', 'the CLI still uses the first server');
    assert.equal(c.urls.get('local'), a.url);
    assert.equal(c.urls.get('local-2'), b.url);
    assert.match(b.log, /new context "local-2".*atelier context use local-2/);
    assert.ok(existsSync(join(a.configDir, 'config.yaml')));

    const env = { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: a.configDir };
    const viaB = await runCli(['--context', 'local-2', 'workshops', 'list', '--output', 'json'], { env });
    assert.equal(viaB.code, 0, viaB.stderr);
    const viaA = await runCli(['workshops', 'list', '--output', 'json'], { env });
    assert.equal(viaA.code, 0, viaA.stderr);

    // Restarted on another port, the second server moves its own context only.
    await b.stop();
    await b.boot();
    c = contexts(a.configDir);
    assert.equal(c.urls.get('local-2'), b.url);
    assert.equal(c.urls.get('local'), a.url);
    assert.equal(c.current, 'local');
    assert.equal(c.urls.size, 2, 'no third context for a server that has one');
  });
});
