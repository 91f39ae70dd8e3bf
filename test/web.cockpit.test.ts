import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { actors } from './helpers/actors.js';
import {
  accessibilityProblems,
  buildDashboard,
  CHROMIUM,
  CHROMIUM_ARGS,
  dashboardServer,
  endDashboardTest,
  SHOTS,
  signInThroughPages,
} from './helpers/dashboard.js';
import type { TestServer } from './helpers/server.js';

// The cockpit (ADR-008) end to end: the built app served by a real server, a real project
// directory on this machine, driven in Debian's Chromium by playwright-core. People sign in
// through the issuer's real pages. The project's directory name and its atelier.yaml hold markup
// and a right-to-left override: the page must show them as text.

const MARKUP_DIR = '<img src=x onerror=window.__pwned=1> \u202Eshop';
const SETTINGS = [
  'egress:',
  // Close to the list, so that a plan's diff shows it in its context.
  '  # Shop settings <script>window.__pwned=1</script> \u202Edlrow',
  '  allow:',
  '    - api.stripe.com   # payments <img src=x onerror="window.__pwned=1">',
  '',
  '# kept as it is, byte for byte',
  'slots: []',
  '',
].join('\n');

/** A project directory named with markup, its atelier.yaml as above; the parent is the caller's to remove. */
function projectDir(): { parent: string; dir: string } {
  const parent = mkdtempSync('/tmp/atelier-cockpit-');
  const dir = join(parent, MARKUP_DIR);
  mkdirSync(dir);
  writeFileSync(join(dir, 'atelier.yaml'), SETTINGS);
  return { parent, dir };
}

/** One build of the app for both servers (the second suite removes it). */
let dist: string | undefined;

interface Plan {
  planId: string;
  fingerprint: string;
  actionId: string;
}

/** A page's own errors, dialogs and CSP violations, kept to check that nothing ran. */
function watch(page: Page): { dialogs: string[]; violations: string[]; errors: string[] } {
  const w = { dialogs: [] as string[], violations: [] as string[], errors: [] as string[] };
  page.on('dialog', (d) => {
    w.dialogs.push(`${d.type()}: ${d.message()}`);
    void d.dismiss().catch(() => undefined);
  });
  page.on('console', (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) w.violations.push(m.text());
  });
  page.on('pageerror', (e) => w.errors.push(e.message));
  return w;
}

/** Nothing from the project's text ran or became an element, and the page does not scroll sideways. */
async function nothingRan(page: Page, w: ReturnType<typeof watch>, where: string): Promise<void> {
  assert.equal(await page.evaluate<unknown>('window.__pwned'), undefined, `${where}: a payload ran`);
  assert.deepEqual(w.dialogs, [], `${where}: a dialog opened`);
  assert.deepEqual(w.violations, [], `${where}: CSP violations`);
  assert.deepEqual(w.errors, [], `${where}: page errors`);
  const injected = await page.evaluate<string[]>(`[...document.querySelectorAll('body *')].flatMap((el) =>
    ['IMG', 'SCRIPT', 'IFRAME', 'svg', 'STYLE', 'B', 'I'].includes(el.tagName) ? [el.tagName] :
    [...el.attributes].filter((a) => a.name.startsWith('on')).map((a) => el.tagName + '[' + a.name + ']'))`);
  assert.deepEqual(injected, [], `${where}: elements injected`);
  const sideways = await page.evaluate<string[]>(`document.documentElement.scrollWidth <= window.innerWidth ? [] :
    [...document.querySelectorAll('body *')].filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
      .slice(0, 10).map((el) => el.tagName + '.' + el.className + '[' + el.getAttribute('data-testid') + ']')`);
  assert.deepEqual(sideways, [], `${where}: the page scrolls sideways`);
}

/**
 * Applies `plan` from `page` as the page itself would: its cookie, the cockpit's CSRF token from
 * `GET /api/workspace/csrf`, same origin. Answers the server's status and body.
 */
async function applyFromPage(page: Page, plan: Plan): Promise<{ status: number; body: { code: string; details?: { command?: string } } }> {
  return page.evaluate(async (p) => {
    const t = (await (await fetch('/api/workspace/csrf')).json()) as { header: string; token: string };
    const res = await fetch(`/api/workspace/actions/${p.actionId}/apply`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [t.header]: t.token },
      body: JSON.stringify({ plan_id: p.planId, fingerprint: p.fingerprint }),
    });
    return { status: res.status, body: (await res.json()) as { code: string; details?: { command?: string } } };
  }, plan);
}

describe('the cockpit in Chromium, write guard on (ATELIER_COCKPIT_WRITES=apply)', { timeout: 300_000 }, () => {
  let server: TestServer | undefined;
  let browser: Browser | undefined;
  const contexts: BrowserContext[] = [];
  const project = projectDir();
  const yaml = join(project.dir, 'atelier.yaml');
  const passwords: Record<string, string> = {};
  const { tokens, as, users } = actors(() => server!);

  before(async () => {
    dist ??= buildDashboard();
    ({ server } = await dashboardServer({ env: { ATELIER_COCKPIT_WRITES: 'apply' }, dist }));
    tokens.admin = server.token;
    Object.assign(
      passwords,
      await users([
        ['lead', 'maintainer'],
        ['watcher', 'viewer'],
      ]),
    );
    const added = await as('admin', 'POST', '/v1/projects', { path: project.dir, name: 'shop' });
    assert.equal(added.status, 201, JSON.stringify(added.body));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  // The second server (the guard off) reuses this build and removes it.
  after(() => endDashboardTest({ contexts, browser, server, repo: project.parent, dist: undefined }));

  async function signedIn(name: string): Promise<{ page: Page; w: ReturnType<typeof watch> }> {
    const context = await browser!.newContext({ viewport: { width: 1100, height: 800 } });
    contexts.push(context);
    const page = await context.newPage();
    page.setDefaultTimeout(20_000);
    const w = watch(page);
    passwords[name] = await signInThroughPages(
      page,
      server!.url,
      name,
      passwords[name]!,
      `a chosen passphrase number ${Object.keys(passwords).indexOf(name)} here`,
    );
    return { page, w };
  }

  let lead: { page: Page; w: ReturnType<typeof watch> };

  it('a maintainer picks the project, sees the catalog with classes and preconditions, and a bad parameter is refused at its field', async () => {
    lead = await signedIn('lead');
    const { page, w } = lead;
    await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Cockpit' }).click();
    await page.getByRole('heading', { name: 'Cockpit' }).waitFor();
    await page.getByTestId('project-select').selectOption('shop');
    assert.equal(new URL(page.url()).pathname, '/cockpit/shop');
    // The directory's name, markup and override, as text.
    assert.equal(await page.getByTestId('project-path').innerText(), project.dir.replace('\u202E', '⟨U+202E⟩'));
    const allow = page.getByTestId('action-egress.allow');
    await allow.waitFor();
    assert.match(await allow.innerText(), /A · project configuration/);
    assert.match(await allow.innerText(), /✓ /);
    assert.match(await page.getByTestId('action-stack.start').innerText(), /B · local services/);
    assert.match(await page.getByTestId('action-extras.install-command').innerText(), /C · system components/);
    assert.equal(await page.getByTestId('copy-mode').count(), 0, 'the guard is on: no copy-the-command notice');

    // Keyboard only from here: the button is reached and pressed with keys, the form submitted with Enter.
    await allow.getByRole('button', { name: 'Choose egress.allow' }).focus();
    await page.keyboard.press('Enter');
    const panel = page.getByTestId('action-panel');
    await panel.waitFor();
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate<string>('document.activeElement.id'), 'param-entry');
    await page.keyboard.type('<b>not a host</b>');
    await page.keyboard.press('Enter');
    const err = panel.getByTestId('error-entry');
    await err.waitFor();
    assert.match(await err.innerText(), /an egress entry is a host name, \*\.suffix or host:port/);
    assert.equal(await panel.getByLabel(/^entry/).getAttribute('aria-invalid'), 'true');
    assert.equal(await panel.getByTestId('plan').count(), 0);
    // An empty required value is refused before anything is sent.
    await panel.getByLabel(/^entry/).fill('');
    await panel.getByRole('button', { name: 'Plan' }).click();
    assert.equal(await err.innerText(), 'entry is required');
    assert.equal(readFileSync(yaml, 'utf8'), SETTINGS);
    await nothingRan(page, w, 'the catalog');
    await page.screenshot({ path: join(SHOTS, 'cockpit-catalog.png'), fullPage: true });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the catalog and the form');
  });

  it('plan → confirm → apply → verification → rollback restores the exact bytes of atelier.yaml', async () => {
    const { page, w } = lead;
    const panel = page.getByTestId('action-panel');
    await panel.getByLabel(/^entry/).fill('api.example.com');
    await panel.getByLabel(/^entry/).press('Enter');
    const plan = panel.getByTestId('plan');
    await plan.waitFor();
    const planId = await plan.getByTestId('plan-id').innerText();
    const fromApi = await as<Plan>('lead', 'GET', `/api/workspace/actions/plans/${planId}`);
    assert.equal(fromApi.status, 200);
    assert.equal(await plan.getByTestId('fingerprint').innerText(), fromApi.body.fingerprint);
    assert.match(await plan.getByTestId('plan-expiry').innerText(), /in \d+ min/);
    const diff = await plan.getByTestId('plan-diff').innerText();
    assert.match(diff, /^\+ {4}- api\.example\.com$/m);
    // The file's own markup and override, shown as text in the diff's context.
    assert.ok(diff.includes('<script>window.__pwned=1</script> ⟨U+202E⟩dlrow'), diff);
    assert.ok(diff.includes('<img src=x onerror="window.__pwned=1">'), diff);
    assert.equal(readFileSync(yaml, 'utf8'), SETTINGS, 'a plan changes nothing');
    await page.screenshot({ path: join(SHOTS, 'cockpit-plan.png'), fullPage: true });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the plan');

    // Confirm with the keyboard: Apply… moves the focus to the confirmation.
    await plan.getByRole('button', { name: 'Apply…' }).focus();
    await page.keyboard.press('Enter');
    await plan.getByRole('button', { name: 'Confirm apply' }).waitFor();
    assert.equal(await page.evaluate<string>('document.activeElement.textContent'), 'Confirm apply');
    await page.keyboard.press('Enter');
    const execution = plan.getByTestId('execution');
    await execution.getByTestId('execution-status').getByText('applied').waitFor();
    assert.match(await execution.getByTestId('verification').innerText(), /Verification passed/);
    const applied = readFileSync(yaml, 'utf8');
    assert.notEqual(applied, SETTINGS);
    assert.match(applied, /^ {4}- api\.example\.com$/m);
    // The new host on a line of its own; every other byte kept, the existing item's comment included.
    assert.equal(applied, SETTINGS.replace('onerror="window.__pwned=1">\n', 'onerror="window.__pwned=1">\n    - api.example.com\n'));
    await page.getByTestId('journal').getByTestId('journal-status').getByText('applied').waitFor();
    await page.screenshot({ path: join(SHOTS, 'cockpit-applied.png'), fullPage: true });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the result');

    await execution.getByRole('button', { name: /^Roll back/ }).click();
    await execution.getByRole('button', { name: 'Confirm rollback' }).click();
    await execution.getByTestId('rollback-status').getByText('rolled_back').waitFor();
    assert.equal(readFileSync(yaml, 'utf8'), SETTINGS, 'the exact prior bytes');
    await page.getByTestId('journal').getByTestId('journal-status').getByText('rolled_back').waitFor();
    await nothingRan(page, w, 'after apply and rollback');

    await page.setViewportSize({ width: 360, height: 740 });
    try {
      await page.screenshot({ path: join(SHOTS, 'cockpit-360px.png'), fullPage: true });
      await nothingRan(page, w, 'at 360 px');
      assert.deepEqual(await accessibilityProblems(page), [], 'axe-core at 360 px');
    } finally {
      await page.setViewportSize({ width: 1100, height: 800 });
    }
  });

  it('a class C action shows its command to copy and no apply button', async () => {
    const { page, w } = lead;
    await page
      .getByTestId('action-extras.install-command')
      .getByRole('button', { name: /^Choose/ })
      .click();
    const panel = page.getByTestId('action-panel');
    await panel.getByRole('heading', { name: /extras\.install-command/ }).waitFor();
    await panel.getByLabel(/^component/).selectOption('chromium');
    await panel.getByRole('button', { name: 'Plan' }).click();
    const c = panel.getByTestId('class-c');
    await c.waitFor();
    const command = await c.getByTestId('copy-command').innerText();
    assert.match(command, /apt-get install .*chromium/);
    assert.match(await panel.getByTestId('effect-command').innerText(), /reaches the network/);
    assert.equal(await panel.getByRole('button', { name: /^Apply/ }).count(), 0);
    assert.equal(await panel.getByRole('button', { name: 'Copy the command' }).count(), 1);
    await nothingRan(page, w, 'class C');
    await page.screenshot({ path: join(SHOTS, 'cockpit-class-c.png'), fullPage: true });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on class C');
  });

  it('the Console runs a command of its fixed read-only list with the signed-in user’s rights', async () => {
    const { page } = lead;
    const select = page.getByTestId('console-command');
    const offered = await select.locator('option').allInnerTexts();
    assert.ok(offered.includes('atelier projects list'), offered.join(', '));
    assert.ok(!offered.some((o) => /actions (plan|apply|rollback)|\binit\b|\bup\b/.test(o)), offered.join(', '));
    await select.selectOption('projects list');
    await page.getByRole('form', { name: 'Console command' }).getByRole('button', { name: 'Run' }).click();
    const out = page.getByTestId('console-stdout');
    await out.waitFor();
    assert.match(await out.innerText(), /shop/);
  });

  it('a viewer sees the catalog and the journal but no form, no apply and no rollback; the server refuses their apply', async () => {
    const { page, w } = await signedIn('watcher');
    await page.goto(`${server!.url}/cockpit/shop`);
    await page.getByTestId('action-egress.allow').waitFor();
    await page.getByTestId('journal').getByTestId('journal-status').first().waitFor();
    await page
      .getByTestId('action-egress.allow')
      .getByRole('button', { name: /^Choose/ })
      .click();
    await page.getByTestId('may-not-plan').waitFor();
    assert.equal(await page.getByRole('button', { name: 'Plan' }).count(), 0);
    assert.equal(await page.getByRole('button', { name: /^Apply|^Roll back/ }).count(), 0);
    await nothingRan(page, w, "the viewer's cockpit");
    await page.screenshot({ path: join(SHOTS, 'cockpit-viewer.png'), fullPage: true });
    assert.deepEqual(await accessibilityProblems(page), [], "axe-core on the viewer's cockpit");

    // A maintainer's plan, applied from the viewer's page as the page would (its cookie, the
    // cockpit's CSRF token, same origin): refused, and the file unchanged.
    const plan = await as<Plan>('lead', 'POST', '/api/workspace/actions/egress.allow/plan', {
      project: 'shop',
      parameters: { entry: 'viewer.example.com' },
    });
    assert.equal(plan.status, 201, JSON.stringify(plan.body));
    const answer = await applyFromPage(page, plan.body);
    assert.equal(answer.status, 403);
    assert.equal(answer.body.code, 'PERMISSION_DENIED');
    assert.equal(readFileSync(yaml, 'utf8'), SETTINGS);
  });
});

describe('the cockpit in Chromium, write guard off (the default)', { timeout: 300_000 }, () => {
  let server: TestServer | undefined;
  let browser: Browser | undefined;
  let context: BrowserContext | undefined;
  const project = projectDir();
  const yaml = join(project.dir, 'atelier.yaml');

  before(async () => {
    dist ??= buildDashboard();
    ({ server } = await dashboardServer({ dist }));
    const added = await server.api(
      'POST',
      '/v1/projects',
      { path: project.dir, name: 'shop' },
      { authorization: `Bearer ${server.token}` },
    );
    assert.equal(added.status, 201, JSON.stringify(added.body));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(() => endDashboardTest({ contexts: [context], browser, server, repo: project.parent, dist }));

  it('every action is shown in copy-the-command mode: the plan, then the command to apply it, no apply button', async () => {
    context = await browser!.newContext({ viewport: { width: 1100, height: 800 } });
    const page = await context.newPage();
    page.setDefaultTimeout(20_000);
    const w = watch(page);
    await signInThroughPages(page, server!.url, 'admin', server!.password, 'a chosen passphrase for the second server');
    await page.goto(`${server!.url}/cockpit/shop`);
    await page.getByTestId('copy-mode').waitFor();
    await page
      .getByTestId('action-egress.allow')
      .getByRole('button', { name: /^Choose/ })
      .click();
    const panel = page.getByTestId('action-panel');
    await panel.getByLabel(/^entry/).fill('api.example.com');
    await panel.getByRole('button', { name: 'Plan' }).click();
    const copy = panel.getByTestId('copy-apply');
    await copy.waitFor();
    const planId = await panel.getByTestId('plan-id').innerText();
    assert.equal(await copy.getByTestId('copy-command').innerText(), `atelier actions apply ${planId}`);
    assert.equal(await panel.getByRole('button', { name: /^Apply/ }).count(), 0);
    assert.equal(readFileSync(yaml, 'utf8'), SETTINGS);
    await nothingRan(page, w, 'copy-the-command mode');
    await page.screenshot({ path: join(SHOTS, 'cockpit-copy-command.png'), fullPage: true });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core in copy-the-command mode');

    // And the server says the same to a page that tries anyway.
    const fromApi = await server!.api<Plan>('GET', `/api/workspace/actions/plans/${planId}`, undefined, {
      authorization: `Bearer ${server!.token}`,
    });
    const answer = await applyFromPage(page, fromApi.body);
    assert.equal(answer.body.code, 'WRITES_COPY_COMMAND');
    assert.equal(answer.body.details?.command, `atelier actions apply ${planId}`);
    assert.equal(readFileSync(yaml, 'utf8'), SETTINGS);
  });
});
