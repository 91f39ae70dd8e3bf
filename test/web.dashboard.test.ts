import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Fastify from 'fastify';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { actors } from './helpers/actors.js';
import {
  CHROMIUM,
  CHROMIUM_ARGS,
  accessibilityProblems,
  SHOTS,
  dashboardServer,
  endDashboardTest,
  signInThroughPages,
  until,
} from './helpers/dashboard.js';
import { makeRepo, type TestServer } from './helpers/server.js';
import { webRoutes } from '../src/server/routes/web.js';
import type { BrowserSessions } from '../src/server/browserSessions.js';

// The dashboard end to end: the built app (web/, built here from its sources), served by a real
// server, driven in Debian's Chromium (/usr/bin/chromium, from scripts/install.sh) by
// playwright-core. People sign in through the issuer's real pages; an agent files requests
// through the API from outside its real workshop.
/** Screenshots of each page (git-ignored). */

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
  const { tokens, as, workshopWithAgent, users } = actors(() => server);
  const file = (payload: Record<string, unknown>, category = 'ALLOWLIST_EXPANSION') =>
    as<Approval>('agent', 'POST', `/v1/workshops/${ws}/approvals`, { category, payload });

  before(async () => {
    ({ server, dist } = await dashboardServer());
    tokens.admin = server.token;
    Object.assign(
      passwords,
      await users(
        [
          ['owner', 'member'],
          ['lead', 'maintainer'],
          ['watcher', 'viewer'],
          ['other', 'member'],
        ],
        (name) => name === 'owner' || name === 'other',
      ),
    );
    repo = makeRepo();
    ws = await workshopWithAgent(repo, 'dash');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(() => endDashboardTest({ contexts: contexts, browser, server, repo, dist }));

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
    const js = await fetch(`${server.url}${asset}`, { headers: { 'accept-encoding': 'identity' } });
    assert.equal(js.status, 200);
    assert.match(js.headers.get('cache-control') ?? '', /immutable/);
    assert.equal(js.headers.get('content-encoding'), null);
    const plain = await js.text();
    // Precompressed copies: brotli when taken, else gzip; each decodes to the same script.
    for (const [accept, coding] of [
      ['gzip, deflate, br', 'br'],
      ['br;q=0, gzip', 'gzip'],
      ['gzip;q=0.5', 'gzip'],
      ['deflate', null],
    ] as const) {
      const r = await fetch(`${server.url}${asset}`, { headers: { 'accept-encoding': accept } });
      assert.equal(r.headers.get('content-encoding'), coding, accept);
      assert.match(r.headers.get('vary') ?? '', /accept-encoding/i);
      assert.equal(await r.text(), plain, accept);
    }
    // index.html carries a fresh style nonce in its CSP and its meta tag, and is never cached.
    const again = await fetch(`${server.url}/`);
    const nonce = /style-src 'self' 'nonce-([A-Za-z0-9+/=]+)'/.exec(again.headers.get('content-security-policy') ?? '')?.[1];
    assert.ok(nonce, again.headers.get('content-security-policy') ?? '');
    assert.ok((await again.text()).includes(`<meta name="atelier-style-nonce" content="${nonce}"`));
    assert.ok(!csp.includes(nonce), 'each load has its own nonce');
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
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on approvals page');
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
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the modal');

    // Approve without a reason: the page asks for one; with one, the server decides.
    await modal.getByRole('button', { name: 'Approve' }).click();
    assert.match(await modal.getByTestId('decision-answer').innerText(), /Say why/);
    await modal.getByLabel(/Reason/).fill('needed for the build');
    await modal.getByRole('button', { name: 'Approve' }).click();
    await modal.getByText('Approved.').waitFor();
    assert.match(await modal.getByTestId('modal-status').innerText(), /APPROVED by lead/);
    // The decision's effect, once the server applied it: the domain is in the workshop's allowlist.
    await modal
      .getByTestId('modal-effect')
      .getByText(/^domain added: pypi\.example\.test\S* is in the workshop's allowlist \(/)
      .waitFor();
    assert.equal(await modal.getByTestId('modal-effect').getAttribute('data-state'), 'applied');

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
    // A viewer owns no workshop and decides nothing: no banner; the request is in the history.
    await page.getByRole('navigation').getByRole('link', { name: 'History' }).click();
    await page.getByTestId(`history-${filed.body.id}`).waitFor();
    assert.equal(await page.getByTestId('approvals-banner').count(), 0);
    await page.getByRole('button', { name: `Open request ${filed.body.id}` }).click();
    const modal = page.getByTestId('approval-modal');
    await modal.getByText('You are a viewer in this tenant').waitFor();
    assert.equal(await modal.getByRole('button', { name: 'Approve' }).count(), 0);
    assert.equal(await modal.getByRole('button', { name: 'Reject' }).count(), 0);
    await page.screenshot({ path: join(SHOTS, 'approval-modal-viewer.png') });
    assert.deepEqual(await accessibilityProblems(page), [], "axe-core on the viewer's modal");

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
    await page.getByTestId(`history-${filed.body.id}`).getByText('REJECTED by owner').waitFor();
  });

  it("the banner counts only what concerns the user: a member's own workshops; the server filters the list and the stream", async () => {
    // `other` (a member) has a workshop of their own; `owner` (a member) has `ws`; `lead` is a maintainer.
    const mine = await as<{ id: string; status: string }>('other', 'POST', '/v1/workshops', { repo, name: 'others' });
    assert.equal(mine.status, 201, JSON.stringify(mine.body));
    try {
      const [ownerPage, otherPage, leadPage] = [await signedIn('owner'), await signedIn('other'), await signedIn('lead')];
      const forOwner = await file({ host: 'owner-only.example.test', justification: "about owner's workshop" });
      assert.equal(forOwner.status, 201, JSON.stringify(forOwner.body));
      await ownerPage.getByText('1 request waits for a decision').waitFor();
      await leadPage.getByText('1 request waits for a decision').waitFor();
      // A request filed by `other` in their own workshop: theirs and the maintainer's, not `owner`'s.
      const forOther = await as<Approval>('other', 'POST', `/v1/workshops/${mine.body.id}/approvals`, {
        category: 'ALLOWLIST_EXPANSION',
        payload: { host: 'other-only.example.test', justification: "about other's workshop" },
      });
      assert.equal(forOther.status, 201, JSON.stringify(forOther.body));
      await otherPage.getByText('1 request waits for a decision').waitFor();
      await leadPage.getByText('2 requests wait for a decision').waitFor();
      // Both events have reached every page by now (the lead's counts the second): the owner's still counts one.
      assert.match(await ownerPage.getByTestId('banner-count').innerText(), /^1 request waits/);
      assert.match(await otherPage.getByTestId('banner-count').innerText(), /^1 request waits/);
      assert.equal(await otherPage.getByRole('button', { name: `Open request ${forOwner.body.id}` }).count(), 0);
      await ownerPage.getByRole('button', { name: `Open request ${forOwner.body.id}` }).waitFor();
      assert.equal(await ownerPage.getByRole('button', { name: `Open request ${forOther.body.id}` }).count(), 0);
      await ownerPage.screenshot({ path: join(SHOTS, 'approvals-owner-scope.png') });

      // The server filters: the list with concerns=me, and the stream after a reload (a fresh list).
      const ids = async (who: string): Promise<string[]> =>
        (await as<{ items: Approval[] }>(who, 'GET', '/v1/approvals?status=PENDING&concerns=me')).body.items.map((a) => a.id);
      assert.deepEqual(await ids('owner'), [forOwner.body.id]);
      assert.deepEqual(await ids('other'), [forOther.body.id]);
      assert.deepEqual((await ids('admin')).sort(), [forOwner.body.id, forOther.body.id].sort());
      // The stream: what `other` receives over the dashboard's WebSocket (their cookie), decided elsewhere.
      // (In-page code is written as text: the tests are compiled without the DOM's types.)
      await otherPage.evaluate(`new Promise((ready) => {
        window.frames_ = [];
        const s = new WebSocket('ws://' + location.host + '/v1/approvals/stream?concerns=me');
        s.onmessage = (e) => {
          const ev = JSON.parse(e.data);
          if (ev.type === 'ready') return ready();
          window.frames_.push(ev.type + ' ' + (ev.approval?.payload.host ?? '?'));
        };
      })`);
      // Ordered: the owner's decision first, then the lead's of other's request; other sees only the second.
      const d1 = await as('owner', 'POST', `/v1/approvals/${forOwner.body.id}/decision`, { decision: 'REJECT', reason: 'scoped' });
      assert.equal(d1.status, 200, JSON.stringify(d1.body));
      const d2 = await as('admin', 'POST', `/v1/approvals/${forOther.body.id}/decision`, { decision: 'REJECT', reason: 'scoped' });
      assert.equal(d2.status, 200, JSON.stringify(d2.body));
      await until('a frame on the stream', async () => (await otherPage.evaluate<number>('window.frames_.length')) > 0);
      assert.deepEqual(await otherPage.evaluate<string[]>('window.frames_'), ['decided other-only.example.test']);
      for (const p of [ownerPage, otherPage, leadPage]) await p.getByTestId('approvals-banner').waitFor({ state: 'detached' });
      // A bad value is refused before the upgrade, saying what it takes.
      const bad = await as<{ code: string; message: string }>('owner', 'GET', '/v1/approvals?concerns=everyone');
      assert.equal(bad.status, 400);
      assert.match(bad.body.message, /concerns.*must be me/);
    } finally {
      await as('other', 'DELETE', `/v1/workshops/${mine.body.id}`);
    }
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
    // Side by side (react-diff-view): the new file's line in the new column, as text, marked inserted.
    await modal.getByLabel('Side by side').check();
    const split = modal.getByTestId('split-diff');
    await split.waitFor();
    assert.equal(await split.locator('td.diff-code-insert', { hasText: '<script>window.__pwned=4</script>' }).count(), 1);
    assert.deepEqual(await accessibilityProblems(page), []);
    await page.screenshot({ path: join(SHOTS, 'approval-modal-side-by-side.png') });
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

  it('history filters by status, category and workshop; a request shows its audit trail; the modal is keyboard-only usable', async () => {
    const all = await as<{ items: (Approval & { category: string; workshopId: string })[] }>('owner', 'GET', '/v1/approvals?limit=1000');
    const mirror = all.body.items.find((a) => a.decisionReason === 'use the mirror instead');
    assert.ok(mirror, JSON.stringify(all.body));
    const page = await signedIn('lead');
    await page.getByRole('navigation').getByRole('link', { name: 'History' }).click();
    await page.waitForURL(`${server.url}/history`);
    const table = page.getByTestId('history');
    await table.waitFor();
    // After each change of a filter the table shows exactly what the API lists for that filter, in its order.
    const showsAsApi = async (query: string): Promise<string[]> => {
      const listed = await as<{ items: (Approval & { category: string })[] }>('admin', 'GET', `/v1/approvals?limit=200&${query}`);
      const ids = listed.body.items.map((a) => `history-${a.id}`);
      const rows = table.locator('tbody tr');
      await until(`the history to show ${query}`, async () => {
        const shown = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-testid')));
        return JSON.stringify(shown) === JSON.stringify(ids);
      });
      return listed.body.items.map((a) => a.status);
    };
    await page.getByLabel('Status').selectOption('APPROVED');
    assert.deepEqual([...new Set(await showsAsApi('status=APPROVED'))], ['APPROVED']);
    // Each decision's effect, as the server recorded it.
    assert.match(await table.innerText(), /domain added: pypi\.example\.test\S* is in the workshop's allowlist/);
    await page.getByLabel('Status').selectOption('REJECTED');
    assert.deepEqual([...new Set(await showsAsApi('status=REJECTED'))], ['REJECTED']);
    assert.deepEqual(
      [...new Set(await table.locator('td[data-state]').evaluateAll((tds) => tds.map((td) => td.getAttribute('data-state'))))],
      ['none'],
      'a rejection applied nothing',
    );
    await page.getByLabel('Category').selectOption('PR_GATEWAY');
    assert.ok((await showsAsApi('status=REJECTED&category=PR_GATEWAY')).length > 0);
    // The hostile justification of the earlier PR request is text here too.
    assert.match(await table.innerText(), /<script>window\.__pwned=1<\/script>/);
    await page.getByLabel('Category').selectOption('');
    await page.getByLabel('Workshop').selectOption(ws);
    await showsAsApi(`status=REJECTED&workshop=${ws}`);
    assert.equal(await page.getByTestId(`history-${mirror.id}`).count(), 1);
    await page.screenshot({ path: join(SHOTS, 'history.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on history');

    // The audit trail: filed by the agent through the API, rejected by owner from the dashboard, with the address.
    await page.getByRole('button', { name: `Open request ${mirror.id}` }).click();
    const modal = page.getByTestId('approval-modal');
    const trail = modal.getByTestId('audit-trail');
    await trail.waitFor();
    const rows = await trail.locator('tbody tr').allInnerTexts();
    assert.equal(rows.length, 2, rows.join('\n'));
    assert.match(rows[0]!, new RegExp(`CREATED\\s+agent/${ws}\\s+api\\s+127\\.0\\.0\\.1`));
    assert.match(rows[1]!, /REJECTED\s+user\/owner\s+dashboard\s+127\.0\.0\.1/);
    await page.screenshot({ path: join(SHOTS, 'audit-trail.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the audit trail');

    // Keyboard only: Tab goes round the dialog's controls and never leaves it; Escape closes it.
    for (let i = 0; i < 12; i++) {
      await page.keyboard.press(i % 3 === 2 ? 'Shift+Tab' : 'Tab');
      assert.ok(
        await page.evaluate<boolean>("!!document.activeElement?.closest('dialog[open]')"),
        `focus left the dialog after ${i + 1} presses`,
      );
    }
    await page.keyboard.press('Escape');
    await modal.waitFor({ state: 'detached' });
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
    assert.deepEqual(await accessibilityProblems(page), [], "axe-core on a workshop's page");

    // A reload lands on the same page (the server answers it with the app); back goes to the list.
    await page.reload();
    await page.getByTestId('workshop-status').waitFor();
    await page.goBack();
    await page.getByTestId('workshops').waitFor();
    await page.screenshot({ path: join(SHOTS, 'workshops.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the workshops list');

    // Stopped through the API: the list follows without a reload.
    const stopped = await as('owner', 'POST', `/v1/workshops/${ws}/stop`);
    assert.equal(stopped.status, 200, JSON.stringify(stopped.body));
    await page.getByTestId(`status-${ws}`).filter({ hasNotText: 'Running' }).waitFor();
    assert.equal(await page.getByTestId(`status-${ws}`).innerText(), 'Suspended');
  });
});
