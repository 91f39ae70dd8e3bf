import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
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
  screen,
  shows,
  until,
} from './helpers/dashboard.js';
import { makeRepo, type TestServer } from './helpers/server.js';

// The dashboard's workshops in Debian's Chromium, against a real server: a workshop created from
// the form (with a real simulator), stopped, resumed and deleted from its page; a shell in the
// browser (xterm.js on a session: a PTY that outlives its connection) runs a command, follows a
// resize, and is stopped when its terminal closes; an agent session is attached with its recent output.

describe('dashboard workshops and terminal in Chromium', { timeout: 340_000 }, () => {
  let server: TestServer;
  let repo: string;
  let dist: string;
  let browser: Browser;
  let context: BrowserContext;
  let password = '';
  const { tokens, as } = actors(() => server);
  const cspViolations: string[] = [];

  before(async () => {
    ({ server, dist } = await dashboardServer());
    tokens.admin = server.token;
    const u = await as<{ temporaryPassword: string }>('admin', 'POST', '/v1/users', { name: 'maker', role: 'member' });
    assert.equal(u.status, 201, JSON.stringify(u.body));
    password = u.body.temporaryPassword;
    const t = await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: 'maker', expiresInSeconds: 3600 });
    tokens.maker = t.body.token;
    repo = makeRepo({ 'README.md': '# made in the browser\n' });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(() => endDashboardTest({ contexts: [context], browser, server, repo, dist }));

  /** A page signed in as `maker` (through the real pages the first time; the session cookie after). */
  async function signedIn(): Promise<Page> {
    const first = !context;
    context ??= await browser.newContext({ viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
    });
    if (first) password = await signInThroughPages(page, server.url, 'maker', password, 'a passphrase chosen in the browser');
    return page;
  }

  it('create from the form (with a simulator), stop, resume, a shell that runs a command and follows a resize, an attached session, delete with confirmation', async () => {
    const page = await signedIn();
    await page.getByRole('navigation').getByRole('link', { name: 'Workshops' }).click();
    await page.getByRole('button', { name: 'New workshop' }).click();
    const form = page.getByTestId('create-workshop');

    // A bad field is refused by the server, which says which one.
    await form.getByLabel(/^Repository/).fill(repo);
    await form.getByLabel(/^Name/).fill('Not A Name');
    await form.getByRole('button', { name: 'Create' }).click();
    assert.match(await form.getByTestId('create-answer').innerText(), /name: lowercase letters/);

    await form.getByLabel(/^Name/).fill('from-the-browser');
    await form.getByLabel(/^Simulators/).fill('redis');
    await form.getByLabel(/^Processes/).fill('600');
    await page.screenshot({ path: join(SHOTS, 'workshop-create.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the creation form');
    await form.getByRole('button', { name: 'Create' }).click();
    await page.waitForURL(/\/workshops\/ws-[0-9a-z]+$/, { timeout: 120_000 });
    const id = new URL(page.url()).pathname.split('/').pop()!;
    await page
      .getByTestId('workshop-status')
      .getByText(/^Running/)
      .waitFor();
    assert.match(await page.getByTestId('workshop-limits').innerText(), /600 processes/);
    const sims = page.getByTestId('simulators');
    await sims.getByText('redis', { exact: true }).first().waitFor();
    assert.match(await sims.innerText(), /redis.*\n?.*:\d+/);
    const made = await as<{ name: string; limits: { pids: number } }>('maker', 'GET', `/v1/workshops/${id}`);
    assert.equal(made.body.name, 'from-the-browser');
    assert.equal(made.body.limits.pids, 600);

    // Stop, then resume, from the page.
    await page.getByRole('button', { name: 'Stop', exact: true }).click();
    await page
      .getByTestId('workshop-status')
      .getByText(/^Suspended/)
      .waitFor();
    assert.equal((await as<{ status: string }>('maker', 'GET', `/v1/workshops/${id}`)).body.status, 'Suspended');
    await page.getByRole('button', { name: 'Resume', exact: true }).click();
    await page
      .getByTestId('workshop-status')
      .getByText(/^Running/)
      .waitFor();

    // A shell: typed keys reach bash in the workshop, its output comes back.
    await page.getByRole('button', { name: 'Open a shell' }).click();
    await page
      .getByTestId('terminal-state')
      .getByText(/connected/)
      .waitFor();
    await page.locator('.xterm').click();
    await page.keyboard.type('echo $((6*7))-answer; stty size\n');
    const out = await shows(page, /42-answer\s+\d+ \d+/);
    const before = /42-answer\s+(\d+) (\d+)/.exec(out);
    assert.ok(before, out);
    await page.screenshot({ path: join(SHOTS, 'terminal.png') });
    assert.deepEqual(await accessibilityProblems(page), [], "axe-core on a workshop's page with its terminal");
    // Resize: a narrower window, a terminal with fewer columns, and the PTY is told.
    await page.setViewportSize({ width: 640, height: 900 });
    await page.keyboard.type('clear; echo cols-$(tput cols)-now\n');
    const narrowed = await shows(page, /cols-\d+-now/);
    const cols = Number(/cols-(\d+)-now/.exec(narrowed)![1]);
    assert.ok(cols < Number(before[2]), `${cols} columns after the resize, ${before[2]} before`);
    await page.setViewportSize({ width: 1100, height: 900 });
    // The shell is a session of its own while its terminal is open, stopped when it closes.
    const shellSessions = async () =>
      (await as<{ items: { name: string; running: boolean }[] }>('maker', 'GET', `/v1/workshops/${id}/sessions`)).body.items.filter(
        (s) => s.name.startsWith('shell-') && s.running,
      );
    assert.equal((await shellSessions()).length, 1);
    await page.getByRole('button', { name: 'Close the terminal' }).click();
    await until('the shell session to be stopped', async () => (await shellSessions()).length === 0);

    // An agent session started through the API: attached from the page, its recent output first.
    const started = await as('maker', 'POST', `/v1/workshops/${id}/sessions`, {
      name: 'agent',
      command: ['sh', '-c', 'echo session-says-hello; exec cat'],
    });
    assert.equal(started.status, 201, JSON.stringify(started.body));
    await page.getByTestId('sessions').getByRole('row').filter({ hasText: 'agent' }).getByRole('button', { name: 'Attach' }).click();
    await shows(page, /session-says-hello/);
    await page.locator('.xterm').click();
    await page.keyboard.type('typed-into-the-session\n');
    await until('the session to echo the input', async () => ((await screen(page)).match(/typed-into-the-session/g) ?? []).length >= 2);
    await page.screenshot({ path: join(SHOTS, 'terminal-session.png') });
    await page.getByRole('button', { name: 'Close the terminal' }).click();

    // Delete: the button asks for the name first.
    await page.getByRole('button', { name: 'Delete…' }).click();
    const confirm = page.getByRole('button', { name: 'Delete for good' });
    assert.equal(await confirm.isDisabled(), true);
    await page.getByLabel(/Type its name/).fill('from-the-browse');
    assert.equal(await confirm.isDisabled(), true);
    await page.getByLabel(/Type its name/).fill('from-the-browser');
    await page.screenshot({ path: join(SHOTS, 'workshop-delete.png') });
    assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the delete confirmation');
    await confirm.click();
    await page.waitForURL(`${server.url}/workshops`);
    assert.equal((await as('maker', 'GET', `/v1/workshops/${id}`)).status, 404);
    assert.deepEqual(cspViolations, []);
  });

  it('a member who does not own a workshop sees no Stop, Resume or Delete, and the server refuses the stop made from their page', async () => {
    const w = await as<{ id: string; status: string }>('admin', 'POST', '/v1/workshops', { repo, name: 'admins' });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    try {
      const page = await signedIn();
      await page.goto(`${server.url}/workshops/${w.body.id}`);
      await page
        .getByTestId('workshop-status')
        .getByText(/^Running/)
        .waitFor();
      for (const name of ['Stop', 'Resume', 'Delete…'])
        assert.equal(await page.getByRole('button', { name, exact: true }).count(), 0, `a member who does not own it sees ${name}`);
      // The page's own session and CSRF token: the server refuses anyway.
      const refused = await page.evaluate(async (path) => {
        const s = (await (await fetch('/auth/web/session')).json()) as { csrf: { header: string; token: string } };
        const res = await fetch(path, { method: 'POST', headers: { [s.csrf.header]: s.csrf.token } });
        return { status: res.status, body: (await res.json()) as { code: string; message: string } };
      }, `/v1/workshops/${w.body.id}/stop`);
      assert.equal(refused.status, 403);
      assert.match(refused.body.message, /belongs to someone else/);
      assert.equal((await as<{ status: string }>('admin', 'GET', `/v1/workshops/${w.body.id}`)).body.status, 'Running');
    } finally {
      await as('admin', 'DELETE', `/v1/workshops/${w.body.id}`);
    }
  });

  it("a workshop's usage beside its limits, and its egress log live: a request denied inside it appears without a reload, with its reason", async () => {
    const denying = makeRepo({ 'atelier.yaml': 'egress:\n  deny: [blocked.example.test]\n' });
    const w = await as<{ id: string }>('maker', 'POST', '/v1/workshops', { repo: denying, name: 'live-log', memory: '768m', budgetUsd: 5 });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    try {
      const page = await signedIn();
      const egressReads: string[] = [];
      page.on('request', (r) => {
        if (r.url().includes(`/v1/workshops/${w.body.id}/egress`)) egressReads.push(r.url());
      });
      await page.goto(`${server.url}/workshops/${w.body.id}`);
      await page
        .getByTestId('workshop-status')
        .getByText(/^Running/)
        .waitFor();
      await page.getByTestId('egress-empty').waitFor();

      // Usage: memory, CPU and processes as the workshop's cgroups count them, beside its limits.
      // A shell holds 50 MB while its sleep waits, and a busy loop spins for at most a minute.
      const holder = await as('maker', 'POST', `/v1/workshops/${w.body.id}/execs`, {
        command: ['sh', '-c', 'a=$(head -c 50000000 /dev/zero | tr "\\0" a); sleep 600 & echo held; wait; echo ${#a}'],
      });
      assert.equal(holder.status, 201, JSON.stringify(holder.body));
      const spinner = await as('maker', 'POST', `/v1/workshops/${w.body.id}/execs`, {
        command: ['timeout', '60', 'sh', '-c', 'while :; do :; done'],
      });
      assert.equal(spinner.status, 201, JSON.stringify(spinner.body));
      const usage = page.getByTestId('workshop-usage');
      const MiB = 2 ** 20;
      let memoryText = '';
      await until('the page to show the 50 MB held', async () => {
        memoryText = await usage.getByTestId('usage-memory').innerText();
        const m = /^(\d+) MiB of 768 MiB \(\d+%\)/.exec(memoryText);
        return m !== null && Number(m[1]) >= 48;
      });
      assert.match(memoryText, /· peak \d+ MiB$/);
      assert.equal(await usage.getByRole('meter', { name: 'Memory' }).getAttribute('max'), String(768 * MiB));
      // CPU: a share of its limit over the last 2 s, from two readings of its CPU time.
      let cpuText = '';
      await until('the page to show the busy loop', async () => {
        cpuText = await usage.getByTestId('usage-cpu').innerText();
        return Number(/^(\d+)% of \d+(\.\d+)? CPU/.exec(cpuText)?.[1] ?? 0) > 0;
      });
      assert.match(cpuText, /of CPU time in all$/);
      assert.equal(await usage.getByRole('meter', { name: 'CPU' }).getAttribute('max'), '1');
      // Processes: at least those running in the workshop now (counted inside it by one shell
      // with no child of its own: its glob and echo are built in), itself left out.
      const inside = await server.exec(w.body.id, ['sh', '-c', 'set -- /proc/[0-9]*; echo $#']);
      const running = Number(inside.stdout.trim()) - 1;
      const counted = await as<{ pids: number | null; memoryBytes: number | null; cpuUsec: number | null; note: string | null }>(
        'maker',
        'GET',
        `/v1/workshops/${w.body.id}/usage`,
      );
      assert.equal(counted.status, 200, JSON.stringify(counted.body));
      assert.equal(counted.body.note, null);
      assert.ok(running >= 4, `${running} processes inside: the sandbox's first, the holder, its sleep, the loop`);
      assert.ok(counted.body.pids! >= running, `${counted.body.pids} processes counted, ${running} running`);
      await until('the page to show the processes', async () => {
        const m = /^(\d+) of \d+\b/.exec(await usage.getByTestId('usage-pids').innerText());
        return m !== null && Number(m[1]) >= running;
      });
      assert.equal(
        await usage.getByRole('meter', { name: 'Processes' }).getAttribute('max'),
        String((await as<{ limits: { pids: number } }>('maker', 'GET', `/v1/workshops/${w.body.id}`)).body.limits.pids),
      );
      const { disk } = (
        await as<{ disk?: { enforced: boolean; usedBytes: number | null; quotaBytes: number | null; note: string | null } }>(
          'maker',
          'GET',
          `/v1/workshops/${w.body.id}`,
        )
      ).body;
      assert.ok(disk, 'the API reports no disk for the workshop');
      const diskText = await usage.getByTestId('usage-disk').innerText();
      if (disk.enforced) {
        assert.match(diskText, /^\d+(\.\d)? (MiB|GiB) of \d+(\.\d)? (MiB|GiB) \(\d+%\)/);
        assert.equal(await usage.getByRole('meter', { name: 'Disk' }).getAttribute('max'), String(disk.quotaBytes));
      } else assert.equal(diskText, disk.note);
      assert.match(await usage.getByTestId('usage-spend').innerText(), /\$0\.00 of \$5\.00 budget/);
      assert.equal(await usage.getByRole('meter', { name: 'Model spend' }).count(), 1);

      // A request to a host the project denies, made inside the workshop through its proxy while
      // the page stays open: the row arrives on the page's stream, the page not reloaded.
      await page.evaluate(() => ((globalThis as unknown as { stillThere: boolean }).stillThere = true));
      const tried = await server.exec(w.body.id, [
        'sh',
        '-c',
        'curl -sS -m 30 -o /dev/null -w "%{http_code}" http://blocked.example.test/; true',
      ]);
      assert.equal(tried.stdout.trim(), '403', JSON.stringify(tried));
      const row = page.getByTestId('egress-log').getByRole('row').filter({ hasText: 'blocked.example.test' });
      await row.first().waitFor();
      const text = await row.first().innerText();
      assert.match(text, /blocked\.example\.test:80/);
      assert.match(text, /denied/);
      const recorded = await as<{ items: { host: string; message: string; reason: string }[] }>(
        'maker',
        'GET',
        `/v1/workshops/${w.body.id}/egress`,
      );
      const why = recorded.body.items.find((r) => r.host === 'blocked.example.test');
      assert.ok(why, JSON.stringify(recorded.body));
      assert.ok(text.includes(why.message || why.reason), `the row does not say why: ${text}`);
      assert.equal(
        await page.evaluate(() => (globalThis as unknown as { stillThere?: boolean }).stillThere),
        true,
        'the page was reloaded',
      );
      // Read as a stream (follow), never by the 2 s page read of before.
      assert.ok(egressReads.length > 0 && egressReads.every((u) => u.includes('follow=true')), egressReads.join('\n'));
      await page.screenshot({ path: join(SHOTS, 'workshop-usage.png') });
      assert.deepEqual(await accessibilityProblems(page), [], "axe-core on a workshop's page with its usage and live log");
      assert.deepEqual(cspViolations, []);
      await page.close();
    } finally {
      await as('maker', 'DELETE', `/v1/workshops/${w.body.id}`);
      rmSync(denying, { recursive: true, force: true });
    }
  });
});
