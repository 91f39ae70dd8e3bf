import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, TestServer, type CliResult } from './helpers/server.js';
import { Browser, parseForms, textOf, type Page } from './helpers/browser.js';

// `atelier users`, `atelier tokens`, `atelier auth` as a user runs them: the real CLI against
// a real server, with its own config directory (contexts added by the test, no ATELIER_URL).
const json = <T>(r: CliResult): T => {
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout) as T;
};

/** Approves a device login in the server's pages as a person would: code, sign in, (new password), allow. */
async function approve(url: string, user: string, password: string, newPassword: string): Promise<Page> {
  const b = new Browser();
  let page = await b.get(url);
  for (let step = 0; step < 10; step++) {
    const forms = parseForms(page.html, page.url);
    const form = forms[0];
    if (!form) return page;
    const fields: Record<string, string> = {};
    const changing = 'confirm' in form.fields && 'password' in form.fields;
    if ('username' in form.fields) fields.username = user;
    if ('password' in form.fields) fields.password = changing ? newPassword : password;
    if (changing) fields.confirm = newPassword;
    const button = form.buttons.find((x) => /^(continue|sign in|save and continue|allow)$/i.test(x.text));
    page = await b.submit(page, { ...(form.id ? { form: form.id } : {}), fields, ...(button ? { button: button.text } : {}) });
  }
  throw new Error(`the login did not finish: ${textOf(page.html)}`);
}

describe('CLI identity commands against a real server', () => {
  let server: TestServer;
  let home: string;
  let shortToken = '';
  let shortCreatedAt = 0;
  const adminPassword = 'Correct-Horse-Battery-42';

  /** The CLI with this test's config directory; `env` adds or overrides variables. */
  const cli = (args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CliResult> =>
    server.cli(args, { ...opts, env: { ATELIER_URL: '', ATELIER_TOKEN: '', ATELIER_CONFIG_DIR: join(home, 'config'), ...opts.env } });

  before(async () => {
    server = await TestServer.start();
    home = mkdtempSync('/tmp/atelier-cli-auth-');
    const admin = await cli(['context', 'add', 'admin', '--url', server.url, '--token-stdin'], { input: server.token });
    assert.equal(admin.code, 0, admin.stderr);
    // Expires in a minute: the last test checks the refusal once it has.
    const short = await server.api<{ token: string }>('POST', '/v1/tokens', { name: 'short', expiresInSeconds: 60 });
    assert.equal(short.status, 201, JSON.stringify(short.body));
    shortToken = short.body.token;
    shortCreatedAt = Date.now();
  });
  after(async () => {
    await server?.dispose();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('adds, lists and disables users; the temporary password is printed once', async () => {
    const added = await cli(['users', 'add', 'bob', '--role', 'maintainer']);
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /^temporary password: (\S{12,})$/m);
    assert.match(added.stdout, /This password is shown once/);

    const carol = json<{
      user: { name: string; disabled: boolean; memberships: { tenant: string; role: string }[] };
      temporaryPassword: string;
    }>(await cli(['users', 'add', 'carol', '-o', 'json']));
    assert.equal(carol.user.name, 'carol');
    assert.equal(carol.user.disabled, false);
    assert.deepEqual(carol.user.memberships, [{ tenant: 'default', role: 'member' }]);
    assert.ok(carol.temporaryPassword.length >= 12);

    const list = json<{ name: string; disabled: boolean; memberships: { role: string }[] }[]>(await cli(['users', 'list', '-o', 'json']));
    assert.deepEqual(
      list.map((u) => [u.name, u.memberships[0]?.role, u.disabled]),
      [
        ['admin', 'admin', false],
        ['bob', 'maintainer', false],
        ['carol', 'member', false],
      ],
    );
    const disabled = json<{ name: string; disabled: boolean }>(await cli(['users', 'disable', 'bob', '-o', 'json']));
    assert.equal(disabled.disabled, true);
    const table = await cli(['users', 'list']);
    assert.match(table.stdout, /^bob\s+default:maintainer\s+-\s+local\s+disabled\s/m);
    assert.match(table.stdout, /^carol\s+default:member\s+-\s+local\s+active\s/m);

    const badRole = await cli(['users', 'add', 'dave', '--role', 'owner']);
    assert.equal(badRole.code, 1);
    assert.match(badRole.stderr, /--role must be one of viewer, member, maintainer, admin, got "owner"/);
    const unknown = await cli(['users', 'disable', 'nobody-here']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no user nobody-here .*\(NOT_FOUND\)/);
  });

  it('creates, lists and revokes API tokens; a revoked token is refused with a clear error', async () => {
    const created = json<{ id: string; token: string; name: string; role: string; expiresAt: string }>(
      await cli(['tokens', 'create', '--name', 'ci', '--scope', 'viewer', '--expires', '12h', '-o', 'json']),
    );
    assert.match(created.token, /^atl_/);
    assert.equal(created.role, 'viewer');
    const hours = (Date.parse(created.expiresAt) - Date.now()) / 3_600_000;
    assert.ok(hours > 11.9 && hours <= 12, `expires in ${hours} h`);

    // The new token works as a context of its own, with its scope.
    const add = await cli(['context', 'add', 'ci', '--url', server.url, '--token-stdin'], { input: `${created.token}\n` });
    assert.equal(add.code, 0, add.stderr);
    const me = json<{ user: { name: string }; role: string; via: string; expiresAt: string }>(
      await cli(['--context', 'ci', 'auth', 'status', '-o', 'json']),
    );
    assert.deepEqual([me.user.name, me.role, me.via], ['admin', 'viewer', 'api-token']);
    const denied = await cli(['--context', 'ci', 'users', 'list']);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /PERMISSION_DENIED/);
    const above = await cli(['--context', 'ci', 'tokens', 'create', '--scope', 'admin']);
    assert.equal(above.code, 1);
    assert.match(above.stderr, /more rights than you: viewer, asked admin/);

    const listed = await cli(['tokens', 'list', '-o', 'json']);
    const items = json<{ id: string; name: string; revoked: boolean }[]>(listed);
    assert.deepEqual(
      items.filter((t) => t.id === created.id).map((t) => [t.name, t.revoked]),
      [['ci', false]],
    );
    assert.ok(!listed.stdout.includes(created.token), 'the list never shows a secret');
    assert.ok(!items.some((t) => 'token' in t));

    assert.deepEqual(json(await cli(['tokens', 'revoke', created.id, '-o', 'json'])), { id: created.id, revoked: true });
    const table = await cli(['tokens', 'list']);
    assert.match(table.stdout, new RegExp(`^${created.id}\\s+ci\\s+admin\\s+viewer\\s.*revoked$`, 'm'));
    const refused = await cli(['--context', 'ci', 'auth', 'status']);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /revoked.*\(context ci\)/i);
    assert.ok(!refused.stderr.includes(created.token), 'no secret in an error');

    const badExpiry = await cli(['tokens', 'create', '--expires', 'tomorrow']);
    assert.equal(badExpiry.code, 1);
    assert.match(badExpiry.stderr, /--expires must be a duration such as 12h, 30d or 1y .*got "tomorrow"/);
    const never = json<{ expiresAt: string | null }>(await cli(['tokens', 'create', '--expires', 'never', '-o', 'json']));
    assert.equal(never.expiresAt, null);
  });

  it('logs in with the device flow, refreshes silently, and logs out (also with the server down)', async () => {
    const add = await cli(['context', 'add', 'sso', '--url', server.url]);
    assert.equal(add.code, 0, add.stderr);
    const env = { ATELIER_URL: '', ATELIER_TOKEN: '', ATELIER_CONFIG_DIR: join(home, 'config') };
    const proc = spawn(process.execPath, [BIN, '--context', 'sso', 'auth', 'login', '--no-browser', '-o', 'json'], {
      env: { ...server.env(), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    const url = await new Promise<string>((resolve, reject) => {
      proc.stderr.on('data', (c: Buffer) => {
        stderr += c.toString();
        const m = /open (http\S+user_code=\S+) where the code is filled in/.exec(stderr);
        if (m) resolve(m[1]!);
      });
      proc.on('exit', () => reject(new Error(`login exited early:\n${stderr}`)));
    });
    assert.match(stderr, /and enter the code: [A-Z]{4}-[A-Z]{4}\n/);
    const done = await approve(url, 'admin', server.password, adminPassword);
    assert.match(textOf(done.html), /signed in/i);
    const code = await new Promise<number | null>((resolve) =>
      proc.exitCode !== null ? resolve(proc.exitCode) : proc.on('exit', resolve),
    );
    assert.equal(code, 0, stderr);
    const result = JSON.parse(stdout) as { user: string; role: string; context: string; expiresAt: string };
    assert.deepEqual([result.user, result.role, result.context], ['admin', 'admin', 'sso']);

    const credsPath = join(home, 'config', 'credentials.json');
    const creds = (): { credentials: Record<string, { kind: string; accessToken: string; refreshToken: string; expiresAt: string }> } =>
      JSON.parse(readFileSync(credsPath, 'utf8')) as ReturnType<typeof creds>;
    const first = creds().credentials.sso!;
    assert.equal(first.kind, 'oidc');
    assert.doesNotMatch(readFileSync(join(home, 'config', 'config.yaml'), 'utf8'), /eyJ|atl_/, 'no token in config.yaml');

    const status = json<{ via: string; user: { name: string }; expiresAt: string }>(
      await cli(['--context', 'sso', 'auth', 'status', '-o', 'json']),
    );
    assert.deepEqual([status.via, status.user.name], ['oidc', 'admin']);

    // A token about to expire is refreshed before the request, and the new one is saved.
    const file = creds();
    file.credentials.sso!.expiresAt = new Date(Date.now() + 30_000).toISOString();
    writeFileSync(credsPath, JSON.stringify(file));
    const refreshed = await cli(['--context', 'sso', 'auth', 'status', '-o', 'json']);
    assert.equal(refreshed.code, 0, refreshed.stderr);
    const second = creds().credentials.sso!;
    assert.notEqual(second.accessToken, first.accessToken);
    assert.notEqual(second.refreshToken, first.refreshToken, 'the refresh token rotates');
    assert.ok(Date.parse(second.expiresAt) > Date.now() + 60_000);

    // Logout revokes at the issuer: the saved session, put back, can no longer be refreshed.
    const out = json<{ removed: boolean; revoked: boolean }>(await cli(['--context', 'sso', 'auth', 'logout', '-o', 'json']));
    assert.deepEqual([out.removed, out.revoked], [true, true]);
    assert.equal(creds().credentials.sso, undefined);
    const stale = creds();
    stale.credentials.sso = { ...second, expiresAt: new Date(0).toISOString() };
    writeFileSync(credsPath, JSON.stringify(stale));
    const after = await cli(['--context', 'sso', 'auth', 'status']);
    assert.equal(after.code, 1);
    assert.match(
      after.stderr,
      /refreshing the session of context sso was refused by the issuer \(invalid_grant.*log in again with `atelier auth login --context sso`/,
    );

    // With the server down, logout still forgets the session and says it could not revoke it.
    await server.stop();
    try {
      const down = await cli(['--context', 'sso', 'auth', 'logout']);
      assert.equal(down.code, 0, down.stderr);
      assert.match(
        down.stdout,
        /could NOT be revoked .*cannot reach the Atelier server at http:\/\/127\.0\.0\.1:\d+.*removed from this machine only/,
      );
      assert.equal(creds().credentials.sso, undefined);
    } finally {
      await server.boot();
    }
  });

  it('refuses an expired API token with a clear error', async () => {
    const wait = shortCreatedAt + 61_000 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const r = await server.cli(['auth', 'status'], { env: { ATELIER_TOKEN: shortToken, ATELIER_CONFIG_DIR: join(home, 'config') } });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /expired/i);
    assert.match(r.stderr, /\(the token in ATELIER_TOKEN\)/);
  });
});
