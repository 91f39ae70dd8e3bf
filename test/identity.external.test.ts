import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, TestServer, makeRepo, type CliResult } from './helpers/server.js';
import { Browser, textOf } from './helpers/browser.js';
import { startExternalIssuer, type ExternalIssuer } from './helpers/external-issuer.js';

// The server configured with an external issuer (a separate oidc-provider standing in for
// Keycloak / Entra ID): the same `atelier auth login` device flow, relayed to that issuer;
// access tokens verified against its JWKS; groups mapped to tenants and roles.
describe('external OIDC issuer', () => {
  let idp: ExternalIssuer;
  let server: TestServer;
  let dir: string;
  let repo: string;

  before(async () => {
    idp = await startExternalIssuer({
      alice: { groups: ['developers', 'unrelated'] },
      carol: { groups: ['leads'] },
      mallory: { groups: ['nothing-mapped'] },
    });
    dir = mkdtempSync('/tmp/atelier-ext-');
    const config = join(dir, 'identity.yaml');
    writeFileSync(
      config,
      [
        `issuer: ${idp.issuer}`,
        `clientId: ${idp.clientId}`,
        `audience: ${idp.audience}`,
        'groupsClaim: groups',
        'groups:',
        '  - { group: developers, tenant: acme, role: member }',
        '  - { group: leads, tenant: acme, role: maintainer }',
        '',
      ].join('\n'),
    );
    server = await TestServer.start({ args: ['--identity-config', config] });
    repo = makeRepo();
  });

  after(async () => {
    await server?.dispose();
    await idp?.close();
    rmSync(dir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  /** A person's CLI: its own config dir with one context for this server, no token. */
  async function personCli(name: string): Promise<(args: string[]) => Promise<CliResult>> {
    const configDir = join(dir, `cli-${name}`);
    const env = { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: configDir };
    const run = (args: string[]): Promise<CliResult> =>
      server.cli(args, { env: { ...env, ATELIER_URL: undefined, ATELIER_TOKEN: undefined } });
    const added = await run(['context', 'add', 'team', '--url', server.url]);
    assert.equal(added.code, 0, added.stderr);
    return run;
  }

  /** `atelier auth login --no-browser` while the test signs in at the external issuer's own pages. */
  async function login(name: string, run: (args: string[]) => Promise<CliResult>): Promise<CliResult> {
    const configDir = join(dir, `cli-${name}`);
    const proc = spawn(process.execPath, [BIN, 'auth', 'login', '--no-browser'], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ATELIER_CONFIG_DIR: configDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    const url = new Promise<string>((resolve, reject) => {
      proc.stderr.on('data', (c: Buffer) => {
        stderr += c.toString();
        const m = /\(or open (\S+) where the code is filled in\)/.exec(stderr);
        if (m) resolve(m[1]!);
      });
      proc.on('close', () => reject(new Error(`login exited early: ${stderr}`)));
    });
    const done = new Promise<CliResult>((resolve) => proc.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr })));
    const start = await url;
    assert.ok(start.startsWith(idp.issuer), `the verification page is the external issuer's: ${start}`);
    const browser = new Browser();
    let page = await browser.get(start);
    page = await browser.submit(page); // the user code is filled in: confirm it
    page = await browser.submit(page); // "continue" on the device confirmation
    page = await browser.submit(page, { fields: { login: name, password: 'any' } });
    page = await browser.submit(page); // consent
    assert.match(textOf(page.html), /Sign-in Success|success/i, textOf(page.html));
    void run;
    return done;
  }

  it('logs in through the external issuer; groups give the tenant and role', async () => {
    const run = await personCli('alice');
    const r = await login('alice', run);
    assert.equal(r.code, 0, r.stderr);
    const status = await run(['auth', 'status', '--output', 'json']);
    assert.equal(status.code, 0, status.stderr);
    const s = JSON.parse(status.stdout) as { user: { name: string }; tenant: { name: string }; role: string; via: string };
    assert.equal(s.user.name, 'alice');
    assert.equal(s.tenant.name, 'acme');
    assert.equal(s.role, 'member');
    assert.equal(s.via, 'oidc');

    // A member of acme may create and use a workshop there.
    const created = await run(['workshops', 'create', '--repo', repo, '--name', 'alices', '--output', 'json']);
    assert.equal(created.code, 0, created.stderr);
    const id = (JSON.parse(created.stdout) as { id: string }).id;
    const ex = await run(['exec', id, '--', 'sh', '-c', 'echo hi from $ATELIER_WORKSHOP_NAME']);
    assert.equal(ex.code, 0, ex.stderr);
    assert.match(ex.stdout, /hi from alices/);
    // The default tenant's admin does not see acme's workshop.
    const adminList = await server.api<{ items: { id: string }[] }>('GET', '/v1/workshops');
    assert.ok(!adminList.body.items.some((w) => w.id === id));
    assert.equal((await run(['workshops', 'delete', id])).code, 0);
  });

  it('a lead is a maintainer of the same tenant', async () => {
    const run = await personCli('carol');
    assert.equal((await login('carol', run)).code, 0);
    const s = JSON.parse((await run(['auth', 'status', '--output', 'json'])).stdout) as { tenant: { name: string }; role: string };
    assert.deepEqual([s.tenant.name, s.role], ['acme', 'maintainer']);
  });

  it('a user whose groups map to no tenant is told so', async () => {
    const run = await personCli('mallory');
    const r = await login('mallory', run);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /groups|no Atelier tenant/);
    const list = await run(['workshops', 'list']);
    assert.notEqual(list.code, 0);
  });

  it('an unreachable issuer is named in the error', async () => {
    await idp.close();
    const run = await personCli('late');
    const r = await run(['auth', 'login', '--no-browser']);
    assert.notEqual(r.code, 0);
    assert.ok(r.stderr.includes(idp.issuer), r.stderr);
  });
});
