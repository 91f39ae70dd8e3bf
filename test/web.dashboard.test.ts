import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import Fastify from 'fastify';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { actors } from './helpers/actors.js';
import { CHROMIUM, CHROMIUM_ARGS, buildDashboard, signInThroughPages } from './helpers/dashboard.js';
import { REPO_ROOT, TestServer, makeRepo } from './helpers/server.js';
import { webRoutes } from '../src/server/routes/web.js';
import type { BrowserSessions } from '../src/server/browserSessions.js';

// The dashboard end to end: the built app (web/, built here from its sources), served by a real
// server, driven in Debian's Chromium (/usr/bin/chromium, from scripts/install.sh) by
// playwright-core. People sign in through the issuer's real pages; an agent files requests
// through the API from outside its real workshop.
const WEB = join(REPO_ROOT, 'web');
/** Screenshots of each page (git-ignored). */
const SHOTS = join(WEB, 'screenshots');

interface Approval {
  id: string;
  status: string;
  decidedBy: string | null;
  decisionReason: string | null;
}

describe('dashboard in Chromium', { timeout: 280_000 }, () => {
  let server: TestServer;
  let repo: string;
  let dist: string;
  let ws: string;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const passwords: Record<string, string> = {};
  const { tokens, as, workshopWithAgent } = actors(() => server);
  const file = (payload: Record<string, unknown>, category = 'ALLOWLIST_EXPANSION') =>
    as<Approval>('agent', 'POST', `/v1/workshops/${ws}/approvals`, { category, payload });

  before(async () => {
    dist = buildDashboard();
    mkdirSync(SHOTS, { recursive: true });
    server = await TestServer.start({ env: { ATELIER_WEB_DIR: dist } });
    tokens.admin = server.token;
    for (const [name, role] of [
      ['owner', 'member'],
      ['lead', 'maintainer'],
      ['watcher', 'viewer'],
    ] as const) {
      const u = await as<{ temporaryPassword: string }>('admin', 'POST', '/v1/users', { name, role });
      assert.equal(u.status, 201, JSON.stringify(u.body));
      passwords[name] = u.body.temporaryPassword;
      if (name === 'owner') {
        const t = await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: name, expiresInSeconds: 3600 });
        tokens.owner = t.body.token;
      }
    }
    repo = makeRepo();
    ws = await workshopWithAgent(repo, 'dash');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(async () => {
    for (const c of contexts) await c.close().catch(() => undefined);
    await browser?.close().catch(() => undefined);
    if (server) {
      if (process.exitCode) console.log(server.log);
      await server.dispose();
    }
    if (repo) rmSync(repo, { recursive: true, force: true });
    if (dist) rmSync(dist, { recursive: true, force: true });
  });

  /** A fresh browser profile, signed in as `name` through the real login, password-change and consent pages. */
  async function signedIn(name: string): Promise<Page> {
    const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
    contexts.push(context);
    const page = await context.newPage();
    page.setDefaultTimeout(15_000);
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    (page as Page & { errors?: string[] }).errors = errors;
    const chosen = `a chosen passphrase ${Object.keys(passwords).indexOf(name)} for the dashboard`;
    passwords[name] = await signInThroughPages(page, server.url, name, passwords[name]!, chosen);
    assert.equal(new URL(page.url()).origin, server.url);
    assert.match(await page.getByTestId('who').innerText(), new RegExp(`^${name} · `));
    return page;
  }

  it('serves the app at / with a strict CSP and caching headers; the API keeps its 404s', async () => {
    const root = await fetch(`${server.url}/`);
    assert.equal(root.status, 200);
    const csp = root.headers.get('content-security-policy') ?? '';
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    assert.equal(root.headers.get('cache-control'), 'no-cache');
    const html = await root.text();
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script in index.html');
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(asset, html);
    const js = await fetch(`${server.url}${asset}`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('cache-control') ?? '', /immutable/);
    // The app routes in the browser: an unknown page is the app; API paths are not.
    assert.equal((await fetch(`${server.url}/workshops/anything`)).status, 200);
    const api = await fetch(`${server.url}/v1/no-such-thing`);
    assert.equal(api.status, 404);
    assert.equal(((await api.json()) as { code: string }).code, 'NOT_FOUND');
    assert.equal((await fetch(`${server.url}/assets/missing.js`)).status, 404);
    // Whatever the case or encoding, an API path is never answered with the app.
    for (const p of ['/V1/workshops', '/%761/nothing', '/OIDC/x']) assert.equal((await fetch(`${server.url}${p}`)).status, 404, p);
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
  });

  it('a server without a built dashboard says so at /, with how to build it', async () => {
    const app = Fastify();
    webRoutes(app, {
      sessions: {} as BrowserSessions,
      csrfKey: 'k',
      signInUnavailable: () => undefined,
      dist: '/nonexistent/web/dist',
    });
    try {
      const r = await app.inject({ method: 'GET', url: '/' });
      assert.equal(r.statusCode, 503);
      assert.match(r.body, /dashboard is not built/);
      assert.match(r.body, /npm ci --prefix web &#38;&#38; npm run build --prefix web/);
    } finally {
      await app.close();
    }
  });

  it('sign in; the banner appears when the agent files a request, the modal shows before/after, approving lets the agent through and the banner leaves', async () => {
    const page = await signedIn('lead');
    await page.screenshot({ path: join(SHOTS, 'approvals-empty.png') });
    assert.equal(await page.getByTestId('approvals-banner').count(), 0);

    const filed = await file({ host: 'pypi.example.test', justification: 'install the test dependencies' });
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    const waiting = as<Approval>('agent', 'GET', `/v1/approvals/${filed.body.id}/wait?timeout=60`);

    const banner = page.getByTestId('approvals-banner');
    await banner.waitFor();
    assert.match(await banner.innerText(), /1 request waits for a decision/);
    assert.match(await banner.innerText(), /soonest expires in \d+ (min|s|h)/);
    await page.screenshot({ path: join(SHOTS, 'approvals-banner.png') });

    await banner.getByRole('button', { name: 'Review' }).click();
    const modal = page.getByTestId('approval-modal');
    await modal.waitFor();
    assert.equal(await modal.getByTestId('justification').innerText(), 'install the test dependencies');
    assert.match(await modal.getByTestId('allowlist-entry').innerText(), /pypi\.example\.test/);
    await modal.getByTestId('allowlist-after').waitFor();
    assert.doesNotMatch(await modal.getByTestId('allowlist-before').innerText(), /pypi\.example\.test/);
    assert.match(await modal.getByTestId('allowlist-after').innerText(), /pypi\.example\.test/);
    await page.screenshot({ path: join(SHOTS, 'approval-modal.png') });

    // Approve without a reason: the page asks for one; with one, the server decides.
    await modal.getByRole('button', { name: 'Approve' }).click();
    assert.match(await modal.getByTestId('decision-answer').innerText(), /Say why/);
    await modal.getByLabel(/Reason/).fill('needed for the build');
    await modal.getByRole('button', { name: 'Approve' }).click();
    await modal.getByText('Approved.').waitFor();
    assert.match(await modal.getByTestId('modal-status').innerText(), /APPROVED by lead/);

    const done = await waiting;
    assert.equal(done.status, 200);
    assert.equal(done.body.status, 'APPROVED');
    assert.equal(done.body.decidedBy, 'lead');
    await banner.waitFor({ state: 'detached' });
    await modal.getByRole('button', { name: 'Close' }).click();
    await page.getByTestId('none-pending').waitFor();
  });

  it('a decision made elsewhere (the API) removes the banner; a rejection with a reason from the modal reaches the agent', async () => {
    const page = await signedIn('owner');
    const first = await file({ host: 'one.example.test', justification: 'first' });
    const second = await file({ host: 'two.example.test', justification: 'second' });
    const banner = page.getByTestId('approvals-banner');
    await page.getByText('2 requests wait for a decision').waitFor();

    // Decided by someone else, through the API: the banner counts one, live.
    const r = await as('owner', 'POST', `/v1/approvals/${first.body.id}/decision`, { decision: 'REJECT', reason: 'not this one' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    await page.getByText('1 request waits for a decision').waitFor();

    await page.getByRole('button', { name: `Open request ${second.body.id}` }).click();
    const modal = page.getByTestId('approval-modal');
    await modal.getByLabel(/Reason/).fill('use the mirror instead');
    await modal.getByRole('button', { name: 'Reject' }).click();
    await modal.getByText('Rejected.').waitFor();
    await banner.waitFor({ state: 'detached' });
    const seen = await as<Approval>('agent', 'GET', `/v1/approvals/${second.body.id}`);
    assert.equal(seen.body.status, 'REJECTED');
    assert.equal(seen.body.decisionReason, 'use the mirror instead');
    await modal.getByRole('button', { name: 'Close' }).click();
  });

  it('a viewer sees the request but no decide button, and the API refuses the decision made with their cookie anyway', async () => {
    const page = await signedIn('watcher');
    const filed = await file({ host: 'viewer.example.test', justification: 'for the viewer' });
    await page.getByTestId('approvals-banner').waitFor();
    await page.getByTestId('approvals-banner').getByRole('button', { name: 'Review' }).click();
    const modal = page.getByTestId('approval-modal');
    await modal.getByText('You are a viewer in this tenant').waitFor();
    assert.equal(await modal.getByRole('button', { name: 'Approve' }).count(), 0);
    assert.equal(await modal.getByRole('button', { name: 'Reject' }).count(), 0);
    await page.screenshot({ path: join(SHOTS, 'approval-modal-viewer.png') });

    // The same call the page would make, from the page (its cookie, its CSRF token): 403.
    const answer = await page.evaluate(async (id) => {
      const s = (await (await fetch('/auth/web/session')).json()) as { csrf: { header: string; token: string } };
      const res = await fetch(`/v1/approvals/${id}/decision`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', [s.csrf.header]: s.csrf.token },
        body: JSON.stringify({ decision: 'APPROVE', reason: 'I am only a viewer' }),
      });
      return { status: res.status, body: (await res.json()) as { code: string } };
    }, filed.body.id);
    assert.equal(answer.status, 403);
    assert.equal(answer.body.code, 'PERMISSION_DENIED');
    const still = await as<Approval>('agent', 'GET', `/v1/approvals/${filed.body.id}`);
    assert.equal(still.body.status, 'PENDING');
    // Tidy: decided by the owner, so the next test starts with nothing pending.
    await as('owner', 'POST', `/v1/approvals/${filed.body.id}/decision`, { decision: 'REJECT', reason: 'done' });
    await page.getByTestId('approvals-banner').waitFor({ state: 'detached' });
  });

  it('a SECRET_REQUEST shows its mode: use as the lower risk, reveal as the riskier', async () => {
    assert.equal((await as('admin', 'PUT', '/v1/secrets/DASH_TOKEN', { value: 'dash-value' })).status, 200);
    // The host a use request names must be allowed: approved first.
    const allow = await file({ host: 'keys.example.test', justification: 'the key host' });
    await as('owner', 'POST', `/v1/approvals/${allow.body.id}/decision`, { decision: 'APPROVE', reason: 'ok' });
    for (let i = 0; i < 200; i++) {
      const a = await as<{ effect: { appliedAt: string | null } }>('owner', 'GET', `/v1/approvals/${allow.body.id}`);
      if (a.body.effect.appliedAt) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const use = await file({ name: 'DASH_TOKEN', host: 'keys.example.test', justification: 'use it' }, 'SECRET_REQUEST');
    assert.equal(use.status, 201, JSON.stringify(use.body));
    const reveal = await file({ name: 'DASH_TOKEN', justification: 'reveal it' }, 'SECRET_REQUEST');
    assert.equal(reveal.status, 201, JSON.stringify(reveal.body));
    const page = await signedIn('lead');
    const modal = page.getByTestId('approval-modal');
    await page.getByRole('button', { name: `Open request ${use.body.id}` }).click();
    const mode = modal.getByTestId('secret-mode');
    assert.equal(await mode.getAttribute('data-mode'), 'use');
    assert.match(
      await mode.innerText(),
      /^Use \(lower risk\): the egress proxy sends Authorization: Bearer \$\{secret:DASH_TOKEN\} to keys\.example\.test/,
    );
    await page.screenshot({ path: join(SHOTS, 'approval-modal-secret-use.png') });
    await modal.getByRole('button', { name: 'Close' }).click();
    await page.getByRole('button', { name: `Open request ${reveal.body.id}` }).click();
    assert.equal(await mode.getAttribute('data-mode'), 'reveal');
    assert.match(await mode.innerText(), /^Reveal \(riskier\): the value enters the workshop/);
    await page.screenshot({ path: join(SHOTS, 'approval-modal-secret-reveal.png') });
    await modal.getByRole('button', { name: 'Close' }).click();
    for (const id of [use.body.id, reveal.body.id])
      await as('owner', 'POST', `/v1/approvals/${id}/decision`, { decision: 'REJECT', reason: 'done' });
    await page.getByTestId('approvals-banner').waitFor({ state: 'detached' });
  });

  it('hostile text in a justification and a diff is shown as text: nothing runs, nothing is injected', async () => {
    const page = await signedIn('lead');
    const hostile =
      '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"><a href="javascript:window.__pwned=3">click</a> ' +
      '**bold** \u202Eevil\u202C [link](javascript:alert(1))';
    // The diff is the workspace's own (the server computes it): a file with a hostile name and content.
    const made = await server.exec(ws, [
      'sh',
      '-c',
      `printf '%s\\n' '<script>window.__pwned=4</script>' > '<img src=x onerror=alert(1)>.js'`,
    ]);
    assert.equal(made.exitCode, 0, JSON.stringify(made));
    const filed = await file({ branch: 'feature/x', justification: hostile }, 'PR_GATEWAY');
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    await page.getByTestId('approvals-banner').getByRole('button', { name: 'Review' }).click();
    const modal = page.getByTestId('approval-modal');
    const text = await modal.getByTestId('justification').innerText();
    assert.ok(text.includes('<script>window.__pwned=1</script>'), text);
    assert.ok(text.includes('<img src=x onerror="window.__pwned=2">'), text);
    // The bidi override is made visible, not applied.
    assert.ok(text.includes('⟨U+202E⟩evil⟨U+202C⟩'), text);
    assert.match(await modal.getByTestId('diff').innerText(), /\+<script>window\.__pwned=4<\/script>/);
    await modal.getByText('<img src=x onerror=alert(1)>.js', { exact: true }).waitFor();
    await page.screenshot({ path: join(SHOTS, 'approval-modal-hostile.png') });
    // At 360 px wide the page still fits: nothing scrolls sideways.
    await page.setViewportSize({ width: 360, height: 740 });
    assert.ok(await page.evaluate<boolean>('document.documentElement.scrollWidth <= 360'));
    await page.screenshot({ path: join(SHOTS, 'approval-modal-360px.png') });
    assert.equal(await page.evaluate<unknown>('window.__pwned'), undefined);
    assert.equal(await page.locator('[data-testid="approval-modal"] img, [data-testid="approval-modal"] script').count(), 0);
    assert.equal(await page.locator('a[href^="javascript:"]').count(), 0);
    assert.deepEqual((page as Page & { errors?: string[] }).errors, []);
    await modal.getByLabel(/Reason/).fill('no');
    await modal.getByRole('button', { name: 'Reject' }).click();
    await modal.getByText('Rejected.').waitFor();
  });

  it('writes with the cookie need the CSRF header; sign-out revokes the session', async () => {
    const page = await signedIn('owner');
    const noCsrf = await page.evaluate(async () => {
      const res = await fetch('/auth/web/tenant', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ tenant: 'default' }),
      });
      return { status: res.status, body: (await res.json()) as { code: string; message: string } };
    });
    assert.equal(noCsrf.status, 403);
    assert.match(noCsrf.body.message, /x-atelier-csrf/);
    const cookies = await page.context().cookies();
    const session = cookies.find((c) => c.name === 'atelier_session');
    assert.ok(session, JSON.stringify(cookies));
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
    assert.equal(await page.evaluate<boolean>("document.cookie.includes('atelier_session')"), false);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('link', { name: 'Sign in' }).waitFor();
    // The old cookie, replayed, no longer opens anything.
    const replay = await fetch(`${server.url}/v1/auth/whoami`, { headers: { cookie: `atelier_session=${session.value}` } });
    assert.equal(replay.status, 401);
    await page.screenshot({ path: join(SHOTS, 'signed-out.png') });
  });

  it('the workshops list and a workshop page show live status, limits and the egress log (a denied attempt appears)', async () => {
    const page = await signedIn('lead');
    await page.getByRole('navigation').getByRole('link', { name: 'Workshops' }).click();
    await page.waitForURL(`${server.url}/workshops`);
    assert.equal(await page.getByTestId(`status-${ws}`).innerText(), 'Running');
    await page.getByRole('link', { name: 'dash', exact: true }).click();
    await page.waitForURL(`${server.url}/workshops/${ws}`);
    assert.match(await page.getByTestId('workshop-status').innerText(), /^Running/);
    assert.match(await page.getByTestId('workshop-limits').innerText(), /\d+ CPU · .+ memory · \d+ processes/);
    // What an earlier test approved is in the workshop's allowlist now.
    assert.match(await page.getByTestId('egress-allow').innerText(), /pypi\.example\.test \(approval, approved by lead\)/);

    // Inside the workshop, a request to a host nobody allowed: the egress proxy holds it and
    // files an ALLOWLIST_EXPANSION (the banner shows it); rejected, the request is refused and the
    // page's egress log shows the denial.
    const tried = server.exec(ws, ['sh', '-c', 'curl -sS -m 60 -o /dev/null -w "%{http_code}" http://denied.example.test/; true']);
    await page.getByTestId('approvals-banner').waitFor();
    const pending = await as<{ items: { id: string; payload: { host: string } }[] }>('owner', 'GET', '/v1/approvals?status=PENDING');
    const asked = pending.body.items.find((a) => a.payload.host === 'denied.example.test');
    assert.ok(asked, JSON.stringify(pending.body));
    const no = await as('owner', 'POST', `/v1/approvals/${asked.id}/decision`, { decision: 'REJECT', reason: 'not for this test' });
    assert.equal(no.status, 200, JSON.stringify(no.body));
    const answered = await tried;
    assert.equal(answered.stdout.trim(), '403', JSON.stringify(answered));
    await page.getByTestId('approvals-banner').waitFor({ state: 'detached' });
    const row = page.getByTestId('egress-log').getByRole('row').filter({ hasText: 'denied.example.test' });
    await row.first().waitFor();
    assert.match(await row.first().innerText(), /denied/);
    await page.screenshot({ path: join(SHOTS, 'workshop.png') });

    // A reload lands on the same page (the server answers it with the app); back goes to the list.
    await page.reload();
    await page.getByTestId('workshop-status').waitFor();
    await page.goBack();
    await page.getByTestId('workshops').waitFor();
    await page.screenshot({ path: join(SHOTS, 'workshops.png') });

    // Stopped through the API: the list follows without a reload.
    const stopped = await as('owner', 'POST', `/v1/workshops/${ws}/stop`);
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    await page.getByTestId(`status-${ws}`).filter({ hasNotText: 'Running' }).waitFor();
    assert.equal(await page.getByTestId(`status-${ws}`).innerText(), 'Suspended');
  });
});
