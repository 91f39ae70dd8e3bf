import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, TestServer, type CliResult } from './helpers/server.js';
import { Browser, textOf, type Page } from './helpers/browser.js';

// `atelier auth login --no-browser`, the real CLI process, polls the server's relay while a
// person (the test's browser) types the code, signs in and answers the consent page.

interface LoginProcess {
  proc: ChildProcess;
  /** verification_uri_complete, as printed on stderr. */
  url: Promise<string>;
  done: Promise<CliResult>;
}

describe('atelier auth login (device flow, CLI process)', () => {
  let server: TestServer;
  let password: string;

  before(async () => {
    server = await TestServer.start();
    password = server.password;
  });
  after(async () => {
    await server?.dispose();
  });

  /** The CLI as a person runs it: the `local` context the server set up, no ATELIER_URL/ATELIER_TOKEN. */
  function env(): NodeJS.ProcessEnv {
    return { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: server.configDir, ATELIER_LOG_LEVEL: 'warn' };
  }

  function cli(args: string[]): Promise<CliResult> {
    return server.cli(args, { env: { ...env(), ATELIER_URL: undefined, ATELIER_TOKEN: undefined } });
  }

  function startLogin(): LoginProcess {
    const proc = spawn(process.execPath, [BIN, 'auth', 'login', '--no-browser'], { env: env(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let found: (url: string) => void;
    const url = new Promise<string>((resolve) => (found = resolve));
    proc.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    proc.stderr!.on('data', (c: Buffer) => {
      stderr += c.toString();
      const m = /\(or open (\S+) where the code is filled in\)/.exec(stderr);
      if (m) found(m[1]!);
    });
    const done = new Promise<CliResult>((resolve) => proc.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr })));
    void done.then((r) => found(`(exited before printing a URL: ${r.code} ${r.stderr})`));
    return { proc, url, done };
  }

  async function toConsent(browser: Browser, url: string, user: string, pw: string): Promise<Page> {
    assert.ok(url.startsWith(`${server.url}/oidc/device?user_code=`), url);
    let page = await browser.get(url);
    page = await browser.submit(page);
    page = await browser.submit(page, { button: 'Continue' });
    return browser.submit(page, { form: 'login', fields: { username: user, password: pw } });
  }

  it('logs in through the browser; the stored session then authenticates the CLI', async () => {
    const login = startLogin();
    const browser = new Browser();
    let page = await toConsent(browser, await login.url, 'admin', password);
    assert.match(textOf(page.html), /Choose a new password/);
    password = 'a long chosen password';
    page = await browser.submit(page, { form: 'change-password', fields: { password, confirm: password } });
    page = await browser.submit(page, { form: 'consent', button: 'Allow' });
    assert.match(textOf(page.html), /signed in as admin/);

    const r = await login.done;
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /logged in as:\s+admin/);
    assert.ok(!r.stdout.includes('eyJ') && !r.stderr.includes('eyJ'), 'no token is printed');

    const status = await cli(['auth', 'status', '--output', 'json']);
    assert.equal(status.code, 0, status.stderr);
    const s = JSON.parse(status.stdout) as { user: { name: string }; via: string };
    assert.equal(s.user.name, 'admin');
    assert.equal(s.via, 'oidc');
  });

  it('Deny in the browser ends the login with a clear message and keeps the previous session', async () => {
    const login = startLogin();
    const browser = new Browser();
    const page = await toConsent(browser, await login.url, 'admin', password);
    await browser.submit(page, { form: 'consent', button: 'Deny' });
    const r = await login.done;
    assert.equal(r.code, 1);
    assert.match(r.stderr, /denied in the browser/);
    assert.equal((await cli(['auth', 'status'])).code, 0, 'the earlier session is untouched');
  });

  it('Ctrl-C while waiting exits 130 and saves nothing', async () => {
    const login = startLogin();
    await login.url;
    login.proc.kill('SIGINT');
    const r = await login.done;
    assert.equal(r.code, 130, r.stderr);
    assert.match(r.stderr, /nothing was saved/);
    assert.equal((await cli(['auth', 'status'])).code, 0);
  });

  it('logout revokes the session at the issuer', async () => {
    // The refresh token as the CLI stored it (this machine has no keyring: a 0600 file in the config dir).
    const stored = readdirSync(server.configDir)
      .filter((f) => statSync(join(server.configDir, f)).isFile())
      .map((f) => readFileSync(join(server.configDir, f), 'utf8'))
      .join('\n');
    const refreshToken = /"refreshToken"\s*:\s*"([^"]+)"/.exec(stored)?.[1];
    assert.ok(refreshToken, 'the login stored a refresh token');

    const out = await cli(['auth', 'logout']);
    assert.equal(out.code, 0, out.stderr);
    const status = await cli(['auth', 'status']);
    assert.notEqual(status.code, 0, 'logged out: the CLI has no credential for the context any more');

    const refresh = await fetch(`${server.url}/v1/auth/device/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ client_id: 'atelier-cli', grant_type: 'refresh_token', refresh_token: refreshToken }),
    });
    assert.equal(refresh.status, 400);
    assert.equal(((await refresh.json()) as { error: string }).error, 'invalid_grant', 'the refresh token was revoked');
  });
});
