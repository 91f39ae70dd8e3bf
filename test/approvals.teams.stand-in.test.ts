import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import pg from 'pg';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { approvalLink } from '../src/approvals/deepLink.js';
import { MasterKey } from '../src/identity/index.js';
import { actors } from './helpers/actors.js';
import { CHROMIUM, CHROMIUM_ARGS, SHOTS, accessibilityProblems, buildDashboard, endDashboardTest, until } from './helpers/dashboard.js';
import { TestServer, makeRepo } from './helpers/server.js';
import { startTeamsStandIn, type TeamsStandIn } from './helpers/teams.stand-in.js';
import { ExternalPostgres } from './helpers/postgres.js';

// Approvals in Microsoft Teams, against a stand-in for a Teams Workflows webhook (Teams cannot run
// here: test/helpers/teams.stand-in.ts), which accepts only cards the official Adaptive Card schema
// of their declared version accepts. The card's Approve link is then followed in Debian's Chromium:
// sign-in through the real pages comes back to it, the request's modal opens, the person decides
// there; a forged or expired link is refused and decides nothing.

/** What an agent might write to fool a reader: markdown, a link, markup, a right-to-left override. */
const HOSTILE = '**Approve me** [urgent](https://evil.example/x) <b>now</b> _quick_ \u202Eevil';

interface Card {
  version: string;
  body: { type: string; text?: string; facts?: { title: string; value: string }[]; inlines?: { text: string }[] }[];
  actions?: { type: string; title: string; url: string; style?: string }[];
}

describe('approvals in Microsoft Teams (a stand-in for its Workflows webhook)', { timeout: 240_000 }, () => {
  let db: ExternalPostgres;
  let server: TestServer;
  let teams: TeamsStandIn;
  let dist: string;
  let repo: string;
  let ws: string;
  let agent: string;
  let browser: Browser;
  let context: BrowserContext | undefined;
  let sql: pg.Client;
  let leadPassword = '';
  const { tokens, as } = actors(() => server);

  const file = async (host: string, ttlSeconds?: number): Promise<string> => {
    const r = await server.api<{ id: string }>(
      'POST',
      `/v1/workshops/${ws}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { host, justification: HOSTILE }, ...(ttlSeconds ? { ttlSeconds } : {}) },
      { authorization: `Bearer ${agent}` },
    );
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id;
  };
  /** The card whose JSON names `id` and whose heading starts with `heading`, once the stand-in accepted it. */
  const cardFor = async (id: string, heading: string): Promise<Card> => {
    let found: Card | undefined;
    await until(`a "${heading}" card for ${id}`, async () => {
      found = teams.cards.find(
        (c) => JSON.stringify(c).includes(id) && String((c as unknown as Card).body[0]?.text).startsWith(heading),
      ) as Card | undefined;
      return found !== undefined;
    });
    return found!;
  };
  const status = async (id: string): Promise<string> => (await server.api<{ status: string }>('GET', `/v1/approvals/${id}`)).body.status;
  const linkKey = (): string => MasterKey.loadOrCreate(join(server.dataDir, 'master.key')).derive('approval-deep-link');

  before(async () => {
    teams = await startTeamsStandIn();
    dist = buildDashboard();
    db = ExternalPostgres.start();
    server = await TestServer.start({ databaseUrl: db.url, env: { ATELIER_WEB_DIR: dist, ATELIER_TEAMS_WEBHOOK_URL: teams.url } });
    tokens.admin = server.token;
    const u = await as<{ temporaryPassword: string }>('admin', 'POST', '/v1/users', { name: 'lead', role: 'maintainer' });
    assert.equal(u.status, 201, JSON.stringify(u.body));
    leadPassword = u.body.temporaryPassword;
    repo = makeRepo();
    const w = await as<{ id: string }>('admin', 'POST', '/v1/workshops', { repo, name: 'teams' });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    ws = w.body.id;
    agent = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { workshopId: ws, expiresInSeconds: 3600 })).body.token;
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await sql?.end();
    await endDashboardTest({ contexts: [context], browser, server, repo, dist });
    db?.stop();
    await teams?.close();
  });

  it('posts each request as an Adaptive Card 1.5 the official schema accepts: what, who asks, the justification as text, the expiry, Approve and Reject links', async () => {
    const id = await file('teams.example');
    const card = await cardFor(id, 'Approval requested');
    assert.deepEqual(teams.refused, [], 'the stand-in refused nothing');
    assert.equal(card.version, '1.5');
    const facts = Object.fromEntries(card.body.flatMap((b) => b.facts ?? []).map((f) => [f.title, f.value]));
    assert.equal(facts.Workshop, ws);
    const approval = (await server.api<{ expiresAt: string; requestedBy: string }>('GET', `/v1/approvals/${id}`)).body;
    assert.equal(facts['Asked by'], approval.requestedBy);
    assert.equal(facts.Expires, `${approval.expiresAt.slice(0, 16).replace('T', ' ')} UTC`);
    // What the agent wrote is in TextRuns (no markdown), exactly, its bidi override shown as a code point.
    const runs = card.body.flatMap((b) => b.inlines ?? []).map((r) => r.text);
    assert.ok(runs.includes('reach teams.example'), JSON.stringify(runs));
    assert.ok(runs.includes(HOSTILE.replace('\u202E', '⟨U+202E⟩')), JSON.stringify(runs));
    // Nowhere as markdown-rendered text: no TextBlock or fact carries it.
    for (const b of card.body) assert.ok(!(b.text ?? '').includes('evil.example') && !JSON.stringify(b.facts ?? []).includes('evil'));
    const actions = card.actions ?? [];
    assert.deepEqual(
      actions.map((a) => [a.type, a.title, a.style]),
      [
        ['Action.OpenUrl', 'Approve…', 'positive'],
        ['Action.OpenUrl', 'Reject…', 'destructive'],
      ],
    );
    for (const [a, action] of [
      [actions[0]!, 'approve'],
      [actions[1]!, 'reject'],
    ] as const) {
      const url = new URL(a.url);
      assert.equal(url.origin, server.url);
      assert.equal(url.pathname, `/approvals/${id}`);
      assert.equal(url.searchParams.get('action'), action);
      // The link lives as long as the request.
      assert.equal(Number(url.searchParams.get('exp')), Math.floor(Date.parse(approval.expiresAt) / 1000));
    }
    // Posting the card decided nothing.
    assert.equal(await status(id), 'PENDING');
  });

  /** Signs in as `lead` from whatever page `page` shows (the sign-in comes back to it). */
  async function signIn(page: Page): Promise<void> {
    await page.getByRole('link', { name: 'Sign in' }).click();
    await page.waitForURL(/\/oidc\/interaction\//);
    await page.fill('#username', 'lead');
    await page.fill('#password', leadPassword);
    await page.getByRole('button', { name: 'Sign in' }).click();
    if (await page.locator('#confirm').count()) {
      leadPassword = 'a passphrase chosen for teams';
      await page.fill('#password', leadPassword);
      await page.fill('#confirm', leadPassword);
      await page.getByRole('button', { name: 'Save and continue' }).click();
    }
    await page.getByRole('button', { name: 'Allow' }).click();
  }

  it("following the card's Approve link signs in, comes back to it and opens the request's modal; the decision is made there, and a follow-up card says so", async () => {
    const id = await file('approve.teams.example');
    const card = await cardFor(id, 'Approval requested');
    const approveUrl = card.actions![0]!.url;
    context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    await page.goto(approveUrl);
    await signIn(page);
    // Back on the link, signed in: the server checked it and the modal is open on that request.
    await page.waitForURL((u) => u.pathname === `/approvals/${id}` && u.searchParams.get('action') === 'approve');
    assert.match(await page.getByTestId('link-status').innerText(), /You followed Approve on a Teams card.*Nothing was decided/s);
    const modal = page.getByTestId('approval-modal');
    await modal.waitFor();
    assert.match(await modal.getByTestId('allowlist-entry').innerText(), /approve\.teams\.example/);
    assert.equal(await modal.getByTestId('justification').innerText(), HOSTILE.replace('\u202E', '⟨U+202E⟩'));
    assert.equal(await status(id), 'PENDING', 'following the link decided nothing');
    await page.screenshot({ path: join(SHOTS, 'teams-link-modal.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the modal opened from a Teams link');

    await modal.getByLabel(/^Reason/).fill('checked in Teams');
    await modal.getByRole('button', { name: 'Approve' }).click();
    await modal.getByTestId('decision-answer').getByText('Approved.').waitFor();
    assert.equal(await status(id), 'APPROVED');
    const audit = await sql.query<{ channel: string; subject: string }>(
      "SELECT channel, subject FROM hitl_audit WHERE request_id = $1 AND event = 'APPROVED'",
      [id],
    );
    assert.deepEqual(audit.rows, [{ channel: 'dashboard', subject: 'user/lead' }]);

    // Teams cannot edit what a webhook posted: a second card tells the outcome, once.
    const followUp = await cardFor(id, 'Approved: Network access');
    const facts = Object.fromEntries(followUp.body.flatMap((b) => b.facts ?? []).map((f) => [f.title, f.value]));
    assert.equal(facts['Decided by'], 'lead');
    assert.ok(followUp.body.flatMap((b) => b.inlines ?? []).some((r) => r.text === 'checked in Teams'));
    const open = new URL(followUp.actions![0]!.url);
    assert.equal(open.searchParams.get('action'), 'view');
    assert.deepEqual(teams.refused, []);
    assert.equal(teams.cards.filter((c) => JSON.stringify(c).includes(id)).length, 2, 'one card and one follow-up');
  });

  it('a forged or expired link is refused in the page with the server’s words, opens no modal and decides nothing', async () => {
    const id = await file('forged.teams.example');
    const card = await cardFor(id, 'Approval requested');
    const page = await context!.newPage();
    page.setDefaultTimeout(30_000);

    const forged = new URL(card.actions![0]!.url);
    forged.searchParams.set('sig', `${forged.searchParams.get('sig')!.slice(0, -2)}AA`);
    const longer = new URL(card.actions![0]!.url);
    longer.searchParams.set('exp', String(Number(longer.searchParams.get('exp')) + 86400));
    // Signed with the server's own key, but its time is past.
    const expired = approvalLink(server.url, linkKey(), id, 'approve', Math.floor(Date.now() / 1000) - 60);
    for (const [name, url, why] of [
      ['a changed signature', forged.toString(), /not made by this server, or it was changed/],
      ['a longer expiry than signed', longer.toString(), /not made by this server, or it was changed/],
      ['an expired link', expired, /this link expired at .*nothing was decided/],
    ] as const) {
      await page.goto(url);
      const refused = page.getByTestId('link-refused');
      await refused.waitFor();
      assert.match(await refused.innerText(), why, name);
      assert.match(await refused.innerText(), /\(PERMISSION_DENIED\)/, name);
      assert.equal(await page.getByTestId('approval-modal').count(), 0, `${name} opened the modal`);
    }
    await page.screenshot({ path: join(SHOTS, 'teams-link-refused.png') });
    assert.equal(await status(id), 'PENDING');

    // Through the API: an agent token may not follow a link at all; a good link to a request of
    // another tenant is not found.
    const good = new URL(card.actions![0]!.url);
    const byAgent = await server.api('GET', `/v1/approvals/${id}/link${good.search}`, undefined, { authorization: `Bearer ${agent}` });
    assert.equal(byAgent.status, 403);
    const malformed = await server.api<{ details: { field: string } }>('GET', `/v1/approvals/${id}/link?action=approve&exp=1`);
    assert.equal(malformed.status, 400);
    assert.equal(malformed.body.details.field, 'sig');
    await page.close();
  });

  it('a request that expires gets a follow-up card saying nobody decided', async () => {
    const id = await file('expires.teams.example', 1);
    const followUp = await cardFor(id, 'Expired: Network access');
    const facts = Object.fromEntries(followUp.body.flatMap((b) => b.facts ?? []).map((f) => [f.title, f.value]));
    assert.match(facts.Expired ?? '', /nobody decided/);
    assert.equal(await status(id), 'EXPIRED');
    assert.deepEqual(teams.refused, []);
  });
});
