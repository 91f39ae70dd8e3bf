import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import {
  CHROMIUM,
  CHROMIUM_ARGS,
  accessibilityProblems,
  SHOTS,
  dashboardServer,
  endDashboardTest,
  shows,
  signInThroughPages,
  until,
} from './helpers/dashboard.js';
import { makeRepo, type TestServer } from './helpers/server.js';

// A workshop's page in Debian's Chromium through network blips: the browser reaches the server
// through a TCP relay that can stop carrying bytes without closing anything, as a lost network
// does (Chromium's own offline switch leaves an open stream alone), or cut every connection.
// - The live egress log notices the silent stream by the server's missing heartbeat, says so,
//   connects again when the network is back (and at once when the browser says it is online),
//   and shows the denials made during and after the blip without a reload, each once.
// - The terminal's shell (a session) is attached again after its connection is cut, with the
//   shell as it was.

/** A TCP relay to `target` that can hold every byte in both directions and let them go again. */
class Relay {
  private readonly server: Server;
  private readonly pairs = new Set<{ client: Socket; upstream: Socket }>();
  private cut = false;
  target: { host: string; port: number } | undefined;

  constructor() {
    this.server = createServer((client) => {
      const upstream = connect(this.target!.port, this.target!.host);
      const pair = { client, upstream };
      this.pairs.add(pair);
      const end = (): void => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('close', end).on('error', end);
      upstream.on('close', end).on('error', end);
      if (!this.cut) this.carry(pair);
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    const a = this.server.address();
    if (!a || typeof a === 'string') throw new Error('the relay has no port');
    return `http://127.0.0.1:${a.port}`;
  }

  private carry({ client, upstream }: { client: Socket; upstream: Socket }): void {
    client.pipe(upstream);
    upstream.pipe(client);
  }

  /** The blip: nothing more goes either way (the kernel's buffers fill, no socket is closed). */
  blip(): void {
    this.cut = true;
    for (const { client, upstream } of this.pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
    }
  }

  /** A harder blip: every connection through the relay is cut (new ones are carried). */
  drop(): void {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  /** The network is back: what was held goes on. */
  back(): void {
    this.cut = false;
    for (const pair of this.pairs) this.carry(pair);
  }

  async close(): Promise<void> {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

describe('dashboard through a network blip in Chromium: the egress log and the terminal', { timeout: 300_000 }, () => {
  let server: TestServer;
  let repo: string;
  let dist: string;
  let browser: Browser;
  let context: BrowserContext;
  let shellContext: BrowserContext | undefined;
  const relay = new Relay();
  /** The server's public URL: the relay's. */
  let publicUrl = '';
  /** The admin's password in force (the first sign-in changes it). */
  let password = '';
  const cspViolations: string[] = [];

  before(async () => {
    publicUrl = await relay.listen();
    // The server's public URL is the relay's: sign-in, the page and its WebSocket all go through it.
    ({ server, dist } = await dashboardServer({ env: { ATELIER_PUBLIC_URL: publicUrl } }));
    const direct = new URL(server.url);
    relay.target = { host: direct.hostname, port: Number(direct.port) };
    repo = makeRepo({ 'atelier.yaml': 'egress:\n  deny: [one.blocked.test, two.blocked.test, three.blocked.test]\n' });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  });

  after(async () => {
    await endDashboardTest({ contexts: [context, shellContext], browser, server, repo, dist });
    await relay.close();
  });

  /**
   * A new page of `ctx` (`watch` sees it first), signed in through the relay, on workshop `id`'s
   * page with the workshop Running; its CSP reports are collected.
   */
  async function workshopPage(ctx: BrowserContext, id: string, watch?: (page: Page) => void): Promise<Page> {
    const page = await ctx.newPage();
    page.setDefaultTimeout(30_000);
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
    });
    watch?.(page);
    password = await signInThroughPages(page, publicUrl, 'admin', password || server.password, 'a passphrase chosen for the blip');
    await page.goto(`${publicUrl}/workshops/${id}`);
    await page
      .getByTestId('workshop-status')
      .getByText(/^Running/)
      .waitFor();
    return page;
  }

  /** A request to `host` from inside the workshop, which its proxy denies (403), made through the API directly (not the relay). */
  async function denied(id: string, host: string): Promise<void> {
    const tried = await server.exec(id, ['sh', '-c', `curl -sS -m 30 -o /dev/null -w "%{http_code}" http://${host}/; true`]);
    assert.equal(tried.stdout.trim(), '403', JSON.stringify(tried));
  }

  const rowOf = (page: Page, host: string) => page.getByTestId('egress-log').getByRole('row').filter({ hasText: host });

  it('the follow stream says it is live at once, before any decision (a blank line: its heartbeat)', async () => {
    const w = await server.createWorkshop({ repo, name: 'quiet' });
    try {
      const abort = new AbortController();
      const res = await fetch(`${server.url}/v1/workshops/${w.id}/egress?follow=true`, {
        headers: { authorization: `Bearer ${server.token}`, accept: 'application/x-ndjson' },
        signal: abort.signal,
      });
      assert.equal(res.status, 200);
      const first = await res.body!.getReader().read();
      abort.abort();
      assert.equal(new TextDecoder().decode(first.value), '\n');
    } finally {
      await server.api('DELETE', `/v1/workshops/${w.id}`);
    }
  });

  it('a silent stream is noticed and opened again: denials made during and after the blip appear without a reload, once each', async () => {
    const w = await server.createWorkshop({ repo, name: 'blip' });
    try {
      context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
      const follows: string[] = [];
      const page = await workshopPage(context, w.id, (p) =>
        p.on('request', (r) => {
          if (r.url().includes(`/v1/workshops/${w.id}/egress`)) follows.push(r.url());
        }),
      );
      await page.getByTestId('egress-empty').waitFor();
      await page.evaluate(() => ((globalThis as unknown as { stillThere: boolean }).stillThere = true));

      await denied(w.id, 'one.blocked.test');
      await rowOf(page, 'one.blocked.test').waitFor();

      // The blip: the open stream goes silent without being closed; a denial is made meanwhile.
      relay.blip();
      await denied(w.id, 'two.blocked.test');
      // Noticed by the missing heartbeat (nothing else would tell: the stream is still open).
      const note = page.getByRole('alert').filter({ hasText: /no word from the server for \d+ s: connecting again/ });
      await note.waitFor({ timeout: 60_000 });
      assert.equal(await rowOf(page, 'two.blocked.test').count(), 0, 'a row came through the blip');
      await page.screenshot({ path: join(SHOTS, 'egress-blip.png') });
      assert.deepEqual(await accessibilityProblems(page), [], 'axe-core on the page saying it connects again');

      // The network comes back, and the browser says so (offline, then online: its `online` event).
      await context.setOffline(true);
      relay.back();
      await context.setOffline(false);
      await rowOf(page, 'two.blocked.test').waitFor({ timeout: 60_000 });
      await page
        .getByRole('alert')
        .filter({ hasText: /connecting again/ })
        .waitFor({ state: 'detached' });

      await denied(w.id, 'three.blocked.test');
      await rowOf(page, 'three.blocked.test').waitFor();

      // Each decision once, in the API's order, the page never reloaded, every read of the log a stream.
      const api = await server.api<{ items: { id: number; host: string }[] }>('GET', `/v1/workshops/${w.id}/egress`);
      const hosts = api.body.items.map((r) => r.host);
      assert.deepEqual(hosts, ['one.blocked.test', 'two.blocked.test', 'three.blocked.test']);
      const shown = await page.getByTestId('egress-log').locator('tbody tr').allInnerTexts();
      assert.deepEqual(
        shown.map((t) => /(\w+)\.blocked\.test/.exec(t)?.[1]),
        ['three', 'two', 'one'],
        `rows shown, newest first:\n${shown.join('\n')}`,
      );
      assert.equal(
        await page.evaluate(() => (globalThis as unknown as { stillThere?: boolean }).stillThere),
        true,
        'the page was reloaded',
      );
      assert.ok(follows.length >= 2, `the stream was not opened again:\n${follows.join('\n')}`);
      assert.ok(
        follows.every((u) => u.includes('follow=true')),
        follows.join('\n'),
      );
      assert.deepEqual(cspViolations, []);
      await page.close();
    } finally {
      await server.api('DELETE', `/v1/workshops/${w.id}`);
    }
  });

  it("the terminal's shell is attached again after its connection is cut, the same shell", async () => {
    const w = await server.createWorkshop({ repo, name: 'shell-blip' });
    try {
      shellContext = await browser.newContext({ viewport: { width: 1100, height: 900 } });
      const page = await workshopPage(shellContext, w.id);
      await page.getByRole('button', { name: 'Open a shell' }).click();
      const state = page.getByTestId('terminal-state');
      await state.getByText(/: connected/).waitFor();
      await page.locator('.xterm').click();
      // A shell variable: only the same shell still has it after the cut.
      await page.keyboard.type('kept=kept-$((40+2)); echo "$kept-before"\n');
      await shows(page, /kept-42-before/);

      relay.drop();
      await state.getByText(/disconnected: trying again/).waitFor();
      await state.getByText(/: connected/).waitFor({ timeout: 60_000 });
      await page.locator('.xterm').click();
      await page.keyboard.type('echo "$kept-after"\n');
      const after = await shows(page, /kept-42-after/);
      // Attached again on a clean screen: the session's recent output is drawn once, not twice.
      assert.equal(after.match(/kept-42-before/g)?.length, 1, after);
      assert.equal(await page.getByRole('button', { name: 'Open a shell' }).count(), 0);

      // Closing the terminal stops the shell's session.
      const shells = async () =>
        (await server.api<{ items: { name: string; running: boolean }[] }>('GET', `/v1/workshops/${w.id}/sessions`)).body.items.filter(
          (s) => s.name.startsWith('shell-') && s.running,
        );
      assert.equal((await shells()).length, 1);
      await page.getByRole('button', { name: 'Close the terminal' }).click();
      await until('the shell session to be stopped', async () => (await shells()).length === 0);
      assert.deepEqual(cspViolations, []);
      await page.close();
    } finally {
      await server.api('DELETE', `/v1/workshops/${w.id}`);
    }
  });
});
