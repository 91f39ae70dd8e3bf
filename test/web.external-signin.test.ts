import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { buildDashboard, CHROMIUM, CHROMIUM_ARGS, endDashboardTest } from './helpers/dashboard.js';
import { startExternalIssuer, type ExternalIssuer } from './helpers/external-issuer.js';
import { TestServer } from './helpers/server.js';

// The dashboard signed in through an external issuer (a separate oidc-provider standing in for
// Keycloak / Entra ID, test/helpers/external-issuer.ts), in Debian's Chromium: the server is the
// OIDC client (authorization code + PKCE with the issuer's dashboard client), the browser only
// ever holds the session cookie, and the issuer's groups decide the tenant and role as they do
// for the CLI.
/** An identity file for `idp` (its CLI and dashboard clients), developers members and leads maintainers of acme. */
function identityFile(dir: string, name: string, idp: ExternalIssuer): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    [
      `issuer: ${idp.issuer}`,
      `clientId: ${idp.clientId}`,
      `webClientId: ${idp.webClientId}`,
      `audience: ${idp.audience}`,
      'groups:',
      '  - { group: developers, tenant: acme, role: member }',
      '  - { group: leads, tenant: acme, role: maintainer }',
      '',
    ].join('\n'),
  );
  return path;
}

describe('dashboard sign-in through an external issuer', () => {
  let idp: ExternalIssuer;
  let server: TestServer;
  let dist: string;
  let dir: string;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  before(async () => {
    idp = await startExternalIssuer({ alice: { groups: ['developers'] }, carol: { groups: ['leads'] } });
    dir = mkdtempSync('/tmp/atelier-ext-web-');
    const config = identityFile(dir, 'identity.yaml', idp);
    dist = buildDashboard();
    server = await TestServer.start({ args: ['--identity-config', config], env: { ATELIER_WEB_DIR: dist } });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await endDashboardTest({ contexts, browser, server, repo: undefined, dist });
    await idp?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function freshPage(): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
    contexts.push(context);
    const page = await context.newPage();
    page.setDefaultTimeout(15_000);
    return page;
  }

  /** Sign in from the dashboard's own button, at the external issuer's login and consent pages. */
  async function signIn(page: Page, name: string, base = server.url, issuer = idp.issuer): Promise<void> {
    await page.goto(`${base}/`);
    await page.getByRole('link', { name: 'Sign in' }).click();
    await page.waitForURL((u) => u.href.startsWith(issuer));
    await page.fill('input[name="login"]', name);
    await page.fill('input[name="password"]', 'any');
    await page.locator('button[type="submit"]').click();
    // oidc-provider's development consent page.
    await page.locator('button[type="submit"]').click();
    await page.getByTestId('who').waitFor();
  }

  it('signs in at the issuer and comes back signed in, with the tenant and role its groups give', async () => {
    const page = await freshPage();
    await signIn(page, 'alice');
    assert.equal(new URL(page.url()).origin, server.url, 'back on the dashboard');
    assert.match(await page.getByTestId('who').innerText(), /^alice · /);
    const session = (await page.evaluate(`fetch('/auth/web/session').then((r) => r.json())`)) as {
      signedIn: boolean;
      tenant: string;
      role: string;
    };
    assert.deepEqual([session.signedIn, session.tenant, session.role], [true, 'acme', 'member']);
    // The browser holds the session cookie only: no token in storage, the cookie not readable by scripts.
    assert.equal(await page.evaluate('localStorage.length + sessionStorage.length'), 0);
    assert.equal(await page.evaluate('document.cookie'), '');
    // (Cookies are not told apart by port: the issuer's own, on 127.0.0.1 too, are left out.)
    const cookies = (await page.context().cookies(server.url)).filter((c) => c.name.startsWith('atelier'));
    assert.deepEqual(
      cookies.map((c) => [c.name, c.httpOnly, c.sameSite]),
      [['atelier_session', true, 'Strict']],
    );
    // The API answers the session as it answers the CLI's token: acme's workshops, as a member.
    const list = (await page.evaluate(`fetch('/v1/workshops').then((r) => r.status)`)) as number;
    assert.equal(list, 200);
  });

  it('a lead is a maintainer; signing out ends the session and revokes its grant at the issuer', async () => {
    const page = await freshPage();
    await signIn(page, 'carol');
    const before = (await page.evaluate(`fetch('/auth/web/session').then((r) => r.json())`)) as {
      role: string;
      csrf: { header: string; token: string };
    };
    assert.equal(before.role, 'maintainer');
    const out = (await page.evaluate(
      `fetch('/auth/web/logout', { method: 'POST', headers: { '${before.csrf.header}': '${before.csrf.token}' } }).then((r) => r.status)`,
    )) as number;
    assert.equal(out, 200);
    const after = (await page.evaluate(`fetch('/auth/web/session').then((r) => r.json())`)) as { signedIn: boolean };
    assert.equal(after.signedIn, false);
    assert.equal((await page.evaluate(`fetch('/v1/workshops').then((r) => r.status)`)) as number, 401);
  });

  it('a sign-in answer this browser did not start is refused with a page that says what to do', async () => {
    const page = await freshPage();
    const r = await page.goto(`${server.url}/auth/web/callback?code=forged&state=forged`);
    assert.equal(r?.status(), 401);
    assert.match(await page.locator('body').innerText(), /not started from this browser/);
  });

  it('an issuer that gives no refresh token: the session ends with its access token, and says so', async () => {
    const brief = await startExternalIssuer({ alice: { groups: ['developers'] } }, { refreshTokens: false, accessTokenSeconds: 3 });
    const config = identityFile(dir, 'brief.yaml', brief);
    const other = await TestServer.start({ args: ['--identity-config', config], env: { ATELIER_WEB_DIR: dist } });
    try {
      const page = await freshPage();
      await signIn(page, 'alice', other.url, brief.issuer);
      assert.equal((await page.evaluate(`fetch('/v1/workshops').then((r) => r.status)`)) as number, 200);
      // Once the access token has expired there is nothing to refresh it with: the next request
      // (the page's own polling, or this one) ends the session, and the page offers to sign in.
      await new Promise((r) => setTimeout(r, 3500));
      const ended = (await page.evaluate(`fetch('/v1/workshops').then(async (r) => [r.status, (await r.json()).message])`)) as [
        number,
        string,
      ];
      assert.equal(ended[0], 401);
      assert.match(ended[1], /no refresh token.*sign in again|missing bearer token/);
      const session = (await page.evaluate(`fetch('/auth/web/session').then((r) => r.json())`)) as { signedIn: boolean };
      assert.equal(session.signedIn, false);
      await page.reload();
      await page.getByRole('link', { name: 'Sign in' }).waitFor();
    } finally {
      await other.dispose();
      await brief.close();
    }
  });

  it('an unreachable issuer: the sign-in page says so and names it', async () => {
    // Another server, whose issuer has never answered (its discovery is read when first needed).
    const gone = await startExternalIssuer({});
    await gone.close();
    const config = join(dir, 'gone.yaml');
    writeFileSync(config, `issuer: ${gone.issuer}\nclientId: ${gone.clientId}\n`);
    const other = await TestServer.start({ args: ['--identity-config', config], env: { ATELIER_WEB_DIR: dist } });
    try {
      const page = await freshPage();
      const r = await page.goto(`${other.url}/auth/web/login`);
      assert.equal(r?.status(), 503);
      const text = await page.locator('body').innerText();
      assert.match(text, /Dashboard sign-in unavailable/);
      assert.ok(text.includes(gone.issuer), text);
    } finally {
      await other.dispose();
    }
  });
});
