import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { REPO_ROOT, TestServer } from './server.js';

/** Debian's Chromium (scripts/install.sh installs it): the only browser the tests and benchmarks drive. */
export const CHROMIUM = '/usr/bin/chromium';
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu'];
const WEB = join(REPO_ROOT, 'web');
/** Where the dashboard tests' screenshots go (git-ignored). */
export const SHOTS = join(WEB, 'screenshots');

/**
 * Builds the dashboard from its sources into a fresh directory (for ATELIER_WEB_DIR), leaving
 * web/dist alone; throws saying what to install when something is missing.
 */
export function buildDashboard(): string {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/install.sh (it installs Debian's chromium)`);
  if (!existsSync(join(WEB, 'node_modules')))
    throw new Error('web/node_modules is missing: run scripts/install.sh (or `npm ci --prefix web`)');
  const dist = mkdtempSync('/tmp/atelier-web-');
  // Each build writes its own directory, so test files that build at the same time do not need
  // Vite's one-build-per-project lock.
  const build = spawnSync('npm', ['run', '-s', 'build', '--prefix', WEB, '--', '--outDir', dist, '--bypass-lock'], { encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`building the dashboard failed:\n${build.stdout}\n${build.stderr}`);
  return dist;
}

/**
 * The dashboard built (buildDashboard, unless `dist` is given: one build shared by two servers) and
 * a test server serving it, with `env` besides; `dist` is the caller's to remove.
 */
export async function dashboardServer(
  opts: { env?: NodeJS.ProcessEnv; dist?: string } = {},
): Promise<{ server: TestServer; dist: string }> {
  const dist = opts.dist ?? buildDashboard();
  mkdirSync(SHOTS, { recursive: true });
  try {
    return { server: await TestServer.start({ env: { ...opts.env, ATELIER_WEB_DIR: dist } }), dist };
  } catch (err) {
    if (!opts.dist) rmSync(dist, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Ends a dashboard test whatever it got to: its browser contexts and browser closed, the server
 * disposed (its log printed when the run failed), the repository and the built dashboard removed.
 */
export async function endDashboardTest(t: {
  contexts: ReadonlyArray<BrowserContext | undefined>;
  browser: Browser | undefined;
  server: TestServer | undefined;
  repo: string | undefined;
  dist: string | undefined;
}): Promise<void> {
  for (const c of t.contexts) await c?.close().catch(() => undefined);
  await t.browser?.close().catch(() => undefined);
  if (t.server) {
    if (process.exitCode) console.log(t.server.log);
    await t.server.dispose();
  }
  if (t.repo) rmSync(t.repo, { recursive: true, force: true });
  if (t.dist) rmSync(t.dist, { recursive: true, force: true });
}

/**
 * Signs in on `page` through the issuer's real pages (login, the first-login password change,
 * consent) and waits for the dashboard to be live. Returns the password now in force.
 */
export async function signInThroughPages(
  page: Page,
  baseUrl: string,
  name: string,
  password: string,
  newPassword: string,
): Promise<string> {
  try {
    await page.goto(`${baseUrl}/`);
    await page.getByRole('link', { name: 'Sign in' }).click();
    await page.waitForURL(/\/oidc\/interaction\//);
    await page.fill('#username', name);
    await page.fill('#password', password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    let now = password;
    if (await page.locator('#confirm').count()) {
      await page.fill('#password', newPassword);
      await page.fill('#confirm', newPassword);
      await page.getByRole('button', { name: 'Save and continue' }).click();
      now = newPassword;
    }
    await page.getByRole('button', { name: 'Allow' }).click();
    await page.getByTestId('who').waitFor();
    await page.getByText('Live: new requests appear here').waitFor();
    return now;
  } catch (err) {
    const text = await page
      .locator('body')
      .innerText()
      .catch(() => '?');
    throw new Error(`signing in as ${name} failed at ${page.url()} showing:\n${text}\n${(err as Error).message}`);
  }
}

const AXE = join(WEB, 'node_modules', 'axe-core', 'axe.min.js');

/**
 * axe-core's serious and critical violations of WCAG 2.1 A and AA on the page as it is now, one
 * line each (`rule (impact): target`). axe is evaluated through the browser's debugging protocol,
 * which the page's CSP does not govern; the page itself is not changed.
 */
export async function accessibilityProblems(page: Page): Promise<string[]> {
  if (!(await page.evaluate<boolean>("typeof window.axe === 'object'"))) await page.evaluate(readFileSync(AXE, 'utf8'));
  const violations = await page.evaluate<{ id: string; impact: string | null; targets: string[] }[]>(
    `axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } })
       .then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, targets: v.nodes.map((n) => n.target.join(' ')) })))`,
  );
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.targets.slice(0, 5).join(', ')}`);
}

/**
 * Waits until `check` holds, asking again every 100 ms (a hang guard of `seconds`, not a timing
 * assertion). For what the page shows that a locator cannot wait for: the page's CSP refuses the
 * `eval` that Playwright's waitForFunction would use for a condition written as text.
 */
export async function until(what: string, check: () => Promise<boolean>, seconds = 30): Promise<void> {
  const end = Date.now() + seconds * 1000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`waited ${seconds} s for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** What xterm shows (its DOM renderer's rows), as text. */
export const screen = (page: Page): Promise<string> => page.locator('.xterm-rows').innerText();

/** Waits until the terminal shows `re`; what it shows then. */
export async function shows(page: Page, re: RegExp): Promise<string> {
  let text = '';
  await until(`the terminal to show ${re}`, async () => re.test((text = await screen(page))));
  return text;
}
