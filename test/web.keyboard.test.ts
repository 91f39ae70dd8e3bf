import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { actors } from './helpers/actors.js';
import { CHROMIUM, CHROMIUM_ARGS, dashboardServer, endDashboardTest, signInThroughPages } from './helpers/dashboard.js';
import { makeRepo, type TestServer } from './helpers/server.js';

// The dashboard with the keyboard only, in Debian's Chromium against a real server: a maintainer
// walks from the approvals list to a request's modal and decides it with Tab, Enter, Space and
// typed text; every control reached shows a visible focus ring; Escape closes the modal and focus
// comes back to the page.

/** What has focus: its tag, its accessible label or text, and whether a focus ring is drawn. */
async function focused(page: Page): Promise<{ tag: string; label: string; ring: boolean }> {
  // Evaluated in the page (a string: the tests are compiled without the DOM's types).
  return page.evaluate<{ tag: string; label: string; ring: boolean }>(`(() => {
    const e = document.activeElement;
    if (!e || e === document.body) return { tag: 'body', label: '', ring: false };
    const style = getComputedStyle(e);
    return {
      tag: e.tagName.toLowerCase(),
      label: (e.getAttribute('aria-label') ?? e.id ?? '') + '|' + (e.textContent ?? '').trim().slice(0, 60),
      ring: style.outlineStyle !== 'none' && style.outlineWidth !== '0px',
    };
  })()`);
}

/** Presses Tab (or Shift+Tab) until what has focus matches `re` (at most `max` times), checking each stop draws its focus ring. */
async function tabTo(page: Page, re: RegExp, key: 'Tab' | 'Shift+Tab' = 'Tab', max = 40): Promise<void> {
  const seen: string[] = [];
  for (let i = 0; i < max; i++) {
    await page.keyboard.press(key);
    const f = await focused(page);
    seen.push(`${f.tag}:${f.label}`);
    if (f.tag !== 'body' && f.tag !== 'main' && f.tag !== 'dialog') assert.ok(f.ring, `no visible focus on ${f.tag} ${f.label}`);
    if (re.test(`${f.tag}:${f.label}`)) return;
  }
  assert.fail(`Tab never reached ${re}; it went through:\n${seen.join('\n')}`);
}

describe('the dashboard with the keyboard only', { timeout: 180_000 }, () => {
  let server: TestServer;
  let dist: string;
  let repo: string;
  let ws: string;
  let browser: Browser;
  let context: BrowserContext | undefined;
  let password = '';
  const { tokens, as, workshopWithAgent, users } = actors(() => server);

  before(async () => {
    ({ server, dist } = await dashboardServer());
    tokens.admin = server.token;
    const passwords = await users([
      ['owner', 'member'],
      ['lead', 'maintainer'],
    ]);
    password = passwords.lead!;
    repo = makeRepo();
    ws = await workshopWithAgent(repo, 'keys');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(() => endDashboardTest({ contexts: [context], browser, server, repo, dist }));

  it('walks from the approvals list to the modal and decides by keyboard only; Escape closes and focus comes back to the page', async () => {
    const filed = await as<{ id: string }>('agent', 'POST', `/v1/workshops/${ws}/approvals`, {
      category: 'ALLOWLIST_EXPANSION',
      payload: { host: 'keys.example', justification: 'decided with the keyboard' },
    });
    assert.equal(filed.status, 201, JSON.stringify(filed.body));
    const id = filed.body.id;
    context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    await signInThroughPages(page, server.url, 'lead', password, 'a passphrase for the keyboard');
    await page.getByRole('button', { name: `Open request ${id}` }).waitFor();

    // From the top of the page: the first stop is the skip link, shown once focused; Enter goes to the page.
    await page.locator('body').focus();
    await page.keyboard.press('Tab');
    const skip = await focused(page);
    assert.match(skip.label, /Skip to the page/);
    assert.ok(skip.ring, 'the skip link shows its focus');
    assert.ok(((await page.getByRole('link', { name: 'Skip to the page' }).boundingBox())?.y ?? -1) >= 0, 'the skip link is on screen');
    await page.keyboard.press('Enter');
    assert.equal((await focused(page)).tag, 'main');

    // To the request's Open button, then Enter: the modal opens with focus inside it.
    await tabTo(page, new RegExp(`^button:Open request ${id}`));
    await page.keyboard.press('Enter');
    const modal = page.getByTestId('approval-modal');
    await modal.waitFor();
    assert.ok(
      await page.evaluate<boolean>("document.querySelector('dialog')?.contains(document.activeElement) ?? false"),
      'focus is in the modal',
    );

    // The reason, typed; then Approve, pressed with Space.
    await tabTo(page, /^textarea:reason/);
    await page.keyboard.type('checked with the keyboard only');
    await tabTo(page, /^button:\|Approve$/);
    await page.keyboard.press('Space');
    await modal.getByTestId('decision-answer').getByText('Approved.').waitFor();
    assert.equal((await as<{ status: string }>('lead', 'GET', `/v1/approvals/${id}`)).body.status, 'APPROVED');

    // Escape closes it; the request left the list, so focus is on the page, not lost.
    await page.keyboard.press('Escape');
    await modal.waitFor({ state: 'detached' });
    assert.equal((await focused(page)).tag, 'main');

    // Back up to the navigation (it comes before the page), Enter on History: focus on the new page.
    await tabTo(page, /^a:\|History$/, 'Shift+Tab');
    await page.keyboard.press('Enter');
    await page.waitForURL(`${server.url}/history`);
    assert.equal((await focused(page)).tag, 'main');
  });
});
