import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
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
} from './helpers/dashboard.js';
import { makeRepo, type TestServer } from './helpers/server.js';

// A workshop's simulators on its dashboard page, in Debian's Chromium against a real server and
// a real postgres simulator: its owner stops, starts, resets and adds simulators from the page
// and sees each answer of the server (its refusals too, as text); those who may operate it see
// the connection variables; a viewer, and a member who does not own it, see names and states and
// never a password, neither on the page nor in anything the server sent the page.

interface Sim {
  name: string;
  status: string;
  statusReason: string | null;
  env: Record<string, string>;
}

describe('dashboard simulators in Chromium', { timeout: 280_000 }, () => {
  let server: TestServer;
  let repo: string;
  let dist: string;
  let ws: string;
  let browser: Browser;
  const contexts: BrowserContext[] = [];
  const passwords: Record<string, string> = {};
  const { tokens, as, users } = actors(() => server);

  before(async () => {
    ({ server, dist } = await dashboardServer());
    tokens.admin = server.token;
    Object.assign(
      passwords,
      await users([
        ['owner', 'member'],
        ['lead', 'maintainer'],
        ['watcher', 'viewer'],
        ['other', 'member'],
      ]),
    );
    repo = makeRepo();
    const w = await as<{ id: string; status: string; statusReason: string | null }>('owner', 'POST', '/v1/workshops', {
      repo,
      name: 'sims',
      simulators: [{ type: 'postgres' }],
    });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    assert.equal(w.body.status, 'Running', w.body.statusReason ?? '');
    ws = w.body.id;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(async () => {
    if (server && ws) await as('owner', 'DELETE', `/v1/workshops/${ws}`).catch(() => undefined);
    await endDashboardTest({ contexts, browser, server, repo, dist });
  });

  /** The workshop's page, signed in as `name` through the real pages; every answer the server sent the page, as text. */
  async function workshopPageAs(name: string): Promise<{ page: Page; received: string[] }> {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    contexts.push(context);
    const page = await context.newPage();
    page.setDefaultTimeout(60_000);
    const received: string[] = [];
    page.on('response', (r) => {
      if (new URL(r.url()).pathname.startsWith('/v1/'))
        void r.text().then(
          (t) => received.push(t),
          () => undefined,
        );
    });
    passwords[name] = await signInThroughPages(
      page,
      server.url,
      name,
      passwords[name]!,
      `a chosen passphrase number ${Object.keys(passwords).indexOf(name)} for the simulators`,
    );
    await page.goto(`${server.url}/workshops/${ws}`);
    await page.getByTestId('simulator-postgres').waitFor();
    return { page, received };
  }

  const simulatorsAs = async (who: string): Promise<Sim[]> => {
    const r = await as<{ items: Sim[] }>(who, 'GET', `/v1/workshops/${ws}/simulators`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.items;
  };
  /** The postgres simulator's password, as its owner is shown it. */
  const postgresPassword = async (): Promise<string> => {
    const pg = (await simulatorsAs('owner')).find((s) => s.name === 'postgres');
    assert.ok(pg?.env.PGPASSWORD && pg.env.PGPASSWORD !== '(redacted)', JSON.stringify(pg));
    return pg.env.PGPASSWORD;
  };

  it('its owner stops, starts, resets and adds simulators from the page, sees each answer, and sees the connection variables', async () => {
    const { page } = await workshopPageAs('owner');
    const row = page.getByTestId('simulator-postgres');
    const answer = page.getByTestId('simulator-answer');
    await row
      .getByTestId('simulator-status')
      .getByText(/^Running/)
      .waitFor();
    await row.getByText('Show the variables (credentials)').click();
    assert.ok((await row.getByTestId('simulator-env').innerText()).includes(`PGPASSWORD=${await postgresPassword()}`));
    await page.getByTestId('simulators').scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SHOTS, 'workshop-simulators.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the simulators of a workshop');

    // Stop: the server's answer, the state on the page and in the API; the process is gone.
    await row.getByRole('button', { name: 'Stop postgres' }).click();
    await answer.getByText(/^postgres: Stopped \(stopped by owner at /).waitFor();
    await row
      .getByTestId('simulator-status')
      .getByText(/^Stopped: stopped by owner/)
      .waitFor();
    const stopped = (await simulatorsAs('owner')).find((s) => s.name === 'postgres')!;
    assert.equal(stopped.status, 'Stopped');
    assert.deepEqual(stopped.env, {}, 'a stopped simulator gives no connection variables');
    assert.equal(await row.getByRole('button', { name: 'Stop postgres' }).count(), 0);
    // Started again (fresh state), then reset: the server says Running each time.
    await row.getByRole('button', { name: 'Start postgres' }).click();
    await answer.getByText('postgres: Running', { exact: true }).waitFor();
    assert.equal((await simulatorsAs('owner')).find((s) => s.name === 'postgres')!.status, 'Running');
    const inside = await server.exec(ws, ['sh', '-c', 'psql "$DATABASE_URL" -Atc "select 40 + 2"']);
    assert.equal(inside.stdout.trim(), '42', JSON.stringify(inside));
    await row.getByRole('button', { name: 'Reset postgres' }).click();
    await answer.getByText('postgres: Running', { exact: true }).waitFor();

    // One more, live: its row appears.
    const form = page.getByRole('form', { name: 'Start a simulator' });
    await form.getByLabel('Type').fill('redis');
    await form.getByRole('button', { name: 'Start simulator' }).click();
    await answer.getByText('redis: Running', { exact: true }).waitFor();
    await page
      .getByTestId('simulator-redis')
      .getByTestId('simulator-status')
      .getByText(/^Running/)
      .waitFor();

    // Refusals are the server's own words and code, shown as text (the name is the caller's text).
    await form.getByLabel('Type').fill('nosuch');
    await form.getByRole('button', { name: 'Start simulator' }).click();
    await answer.getByText(/unknown simulator type "nosuch".*\(INVALID_ARGUMENT\)$/).waitFor();
    assert.equal(await answer.getAttribute('role'), 'alert');
    await form.getByLabel('Type').fill('redis');
    await form.getByRole('button', { name: 'Start simulator' }).click();
    await answer.getByText(/already has a simulator named redis.*\(ALREADY_EXISTS\)$/).waitFor();
    const hostile = '<img src=x onerror="window.__pwned=1">';
    await form.getByLabel('Name').fill(hostile);
    await form.getByRole('button', { name: 'Start simulator' }).click();
    await answer.getByText(/must be a DNS label.*\(INVALID_ARGUMENT\)$/).waitFor();
    // The server quotes the name it refuses (JSON): the markup in it reads as written.
    assert.ok((await answer.innerText()).includes(JSON.stringify(hostile)), await answer.innerText());
    assert.equal(await page.locator('main img').count(), 0);
    assert.equal(await page.evaluate<unknown>('window.__pwned'), undefined);
  });

  it('a viewer and a member who does not own the workshop see names and states, no buttons, and never a password; the server refuses their stop', async () => {
    for (const who of ['watcher', 'other']) {
      const { page, received } = await workshopPageAs(who);
      const row = page.getByTestId('simulator-postgres');
      await row
        .getByTestId('simulator-status')
        .getByText(/^Running/)
        .waitFor();
      assert.match(await page.getByTestId('simulators').innerText(), /postgres\s+postgres/);
      assert.equal(await page.getByRole('columnheader', { name: 'Connection' }).count(), 0, who);
      for (const name of ['Stop postgres', 'Reset postgres', 'Start postgres', 'Start simulator'])
        assert.equal(await page.getByRole('button', { name }).count(), 0, `${who} sees ${name}`);
      // Nor the workshop's own Stop, Resume and Delete (the server would refuse them).
      for (const name of ['Stop', 'Resume', 'Delete…'])
        assert.equal(await page.getByRole('button', { name, exact: true }).count(), 0, `${who} sees the workshop's ${name}`);
      assert.equal(await page.getByText('Show the variables').count(), 0, who);

      // The page's own session, its CSRF token: the server refuses the stop anyway.
      const refused = await page.evaluate(async (path) => {
        const s = (await (await fetch('/auth/web/session')).json()) as { csrf: { header: string; token: string } };
        const res = await fetch(path, { method: 'POST', headers: { [s.csrf.header]: s.csrf.token } });
        return { status: res.status, body: (await res.json()) as { code: string } };
      }, `/v1/workshops/${ws}/simulators/postgres/stop`);
      assert.equal(refused.status, 403, who);
      assert.equal(refused.body.code, 'PERMISSION_DENIED', who);

      // Neither the page nor anything the server sent it holds the password; the API redacts it for them.
      const password = await postgresPassword();
      assert.ok(!(await page.content()).includes(password), `${who}'s page shows the password`);
      assert.ok(received.length > 0);
      assert.ok(!received.some((t) => t.includes(password)), `the server sent ${who} the password`);
      const theirs = (await simulatorsAs(who)).find((s) => s.name === 'postgres')!;
      assert.equal(theirs.env.PGPASSWORD, '(redacted)');
      assert.ok(!JSON.stringify(theirs).includes(password));
      const logs = await as<string>(who, 'GET', `/v1/workshops/${ws}/simulators/postgres/logs`);
      assert.equal(logs.status, 200);
      assert.ok(!JSON.stringify(logs.body).includes(password), `the logs show ${who} the password`);
      if (who === 'watcher') {
        await page.getByTestId('simulators').scrollIntoViewIfNeeded();
        await page.screenshot({ path: join(SHOTS, 'workshop-simulators-viewer.png') });
      }
      assert.deepEqual(await accessibilityProblems(page), [], `axe-core on the simulators as ${who}`);
    }
  });

  it('a maintainer of the tenant operates a workshop it does not own: buttons and connection variables', async () => {
    const { page } = await workshopPageAs('lead');
    // The workshop's own Stop and Delete too: a maintainer may.
    await page.getByRole('button', { name: 'Stop', exact: true }).waitFor();
    await page.getByRole('button', { name: 'Delete…', exact: true }).waitFor();
    const row = page.getByTestId('simulator-postgres');
    await row.getByText('Show the variables (credentials)').click();
    assert.ok((await row.getByTestId('simulator-env').innerText()).includes(`PGPASSWORD=${await postgresPassword()}`));
    await page.getByTestId('simulator-redis').getByRole('button', { name: 'Stop redis' }).click();
    await page
      .getByTestId('simulator-answer')
      .getByText(/^redis: Stopped \(stopped by lead at /)
      .waitFor();
  });
});
