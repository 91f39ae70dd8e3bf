import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { actors } from './helpers/actors.js';
import { CHROMIUM, CHROMIUM_ARGS, SHOTS, dashboardServer, endDashboardTest, signInThroughPages } from './helpers/dashboard.js';
import { makeRepo, type TestServer } from './helpers/server.js';

// The hostile-payload battery: an agent in a real workshop files requests of every category whose
// every free field (justification, command, working directory, pattern, stdin preview, title,
// file names and contents of the diff) is markup, script, `javascript:` links, bidi overrides,
// control characters, very long lines and a near-1 MB command; the fields the server checks
// (branch, host) are refused with markup in them. In Debian's Chromium, on every page that shows
// them (the list, each modal, the history, the effect after a decision): nothing executes (no
// dialog, no script, no injected element, no request anywhere but the server's own API and
// assets, no CSP violation) and the text is shown as written, bidi and control characters made
// visible. Hosts with markup, asked of the workshop's egress proxy, are text in its egress log too.

/** Markup and script of every kind; each, if it ran, would set window.__pwned, open a dialog or fetch evil.example. */
const MARKUP = [
  '<script>window.__pwned=1</script>',
  '<img src=x onerror="window.__pwned=2;alert(2)">',
  '<a href="javascript:window.__pwned=3">click me</a>',
  '</script><script>window.__pwned=4</script>',
  '<svg/onload=window.__pwned=5>',
  '<iframe src="javascript:alert(6)"></iframe>',
  '[a markdown link](javascript:alert(7)) **bold** _em_ `code`',
  'javascript:alert(8)',
  "{{constructor.constructor('alert(9)')()}}",
  '<style>body{display:none}</style>',
  '<meta http-equiv="refresh" content="0;url=http://evil.example/">',
  '<form action="http://evil.example/"><button>go</button></form>',
  '<img src="http://evil.example/beacon.png">',
  '<link rel="stylesheet" href="http://evil.example/x.css">',
  '&lt;b&gt;entity&lt;/b&gt; &amp; <!-- comment -->',
];
/** Bidi overrides and isolates, a zero-width space, BEL and an ANSI colour: each shown as its code point. */
const INVISIBLE = 'name\u202Egnp.exe\u202C and \u2066isolated\u2069 zero\u200Bwidth bell\u0007 \u001b[31mred\u001b[0m';
const INVISIBLE_SHOWN =
  'name⟨U+202E⟩gnp.exe⟨U+202C⟩ and ⟨U+2066⟩isolated⟨U+2069⟩ zero⟨U+200B⟩width bell⟨U+0007⟩ ⟨U+001B⟩[31mred⟨U+001B⟩[0m';
const JUSTIFICATION = [...MARKUP, INVISIBLE].join(' ');
/** What the page shows for text with control or bidi characters (the app's `visible`, in web/src/ApprovalsList.tsx). */
const shownAs = (text: string): string =>
  // eslint-disable-next-line no-control-regex
  text.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g, (c) => {
    return `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`;
  });
/** A line too long for any screen (the justification's limit is 4000 characters). */
const LONG_WORD = `<b>${'W'.repeat(3900)}</b>`;

describe('hostile payloads in the dashboard, in Chromium', { timeout: 280_000 }, () => {
  let server: TestServer;
  let repo: string;
  let dist: string;
  let ws: string;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  const password: Record<string, string> = {};
  const { tokens, as, workshopWithAgent, users } = actors(() => server);
  const file = (category: string, payload: Record<string, unknown>) =>
    as<{ id: string; status: string; code?: string; message?: string }>('agent', 'POST', `/v1/workshops/${ws}/approvals`, {
      category,
      payload,
    });
  /** What the page did that it must not: dialogs, requests elsewhere, CSP violations, errors. */
  const dialogs: string[] = [];
  const requests: string[] = [];
  const violations: string[] = [];
  const errors: string[] = [];
  const ids: Record<string, string> = {};

  before(async () => {
    ({ server, dist } = await dashboardServer());
    tokens.admin = server.token;
    Object.assign(
      password,
      await users([
        ['owner', 'member'],
        ['lead', 'maintainer'],
      ]),
    );
    repo = makeRepo();
    ws = await workshopWithAgent(repo, 'hostile');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
    page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on('dialog', (d) => {
      dialogs.push(`${d.type()}: ${d.message()}`);
      void d.dismiss().catch(() => undefined);
    });
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text());
    });
    page.on('pageerror', (e) => errors.push(e.message));
    password.lead = await signInThroughPages(page, server.url, 'lead', password.lead!, 'a passphrase for the hostile battery');
    // From now on the page may only ask its own server for the app's assets, its API and its feed.
    page.on('request', (r) => requests.push(r.url()));
  });

  /** The cockpit's project: its directory (named with markup) and atelier.yaml hold payloads too. */
  const projectParent = mkdtempSync('/tmp/atelier-hostile-project-');

  after(async () => {
    await endDashboardTest({ contexts: [context], browser, server, repo, dist });
    rmSync(projectParent, { recursive: true, force: true });
  });

  /** Elements that reach past the window's right edge (what makes the page scroll sideways), as `tag.class`. */
  const sideways = (): Promise<string[]> =>
    page.evaluate<string[]>(`document.documentElement.scrollWidth <= window.innerWidth ? [] :
      [...document.querySelectorAll('body *')].filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
        .slice(0, 10).map((el) => el.tagName + '.' + el.className + '[' + el.getAttribute('data-testid') + ']')`);

  /** Nothing ran, nothing was injected, nothing was asked of anyone but the server's API and assets. */
  async function nothingHappened(where: string): Promise<void> {
    assert.equal(await page.evaluate<unknown>('window.__pwned'), undefined, `${where}: a payload ran`);
    assert.deepEqual(dialogs, [], `${where}: a dialog opened`);
    const injected = await page.evaluate<string[]>(`[...document.querySelectorAll('body *')].flatMap((el) => {
      const bad = ['IMG', 'SCRIPT', 'IFRAME', 'svg', 'STYLE', 'META', 'LINK', 'OBJECT', 'EMBED', 'B', 'I'].includes(el.tagName) ||
        (el.tagName === 'FORM' && el.hasAttribute('action')) ? [el.tagName] : [];
      const handlers = [...el.attributes].filter((a) => a.name.startsWith('on')).map((a) => el.tagName + '[' + a.name + ']');
      const links = el.tagName === 'A' && /^\\s*javascript:/i.test(el.getAttribute('href') ?? '') ? ['A[href=javascript:]'] : [];
      return [...bad, ...handlers, ...links];
    })`);
    assert.deepEqual(injected, [], `${where}: elements injected`);
    const elsewhere = requests.filter((u) => {
      const url = new URL(u);
      return (
        url.origin.replace(/^ws/, 'http') !== server.url ||
        !/^\/(assets\/|v1\/|api\/workspace\/|auth\/web\/|$|history$|favicon\.ico$)/.test(url.pathname)
      );
    });
    assert.deepEqual(elsewhere, [], `${where}: requests to unexpected URLs`);
    assert.deepEqual(violations, [], `${where}: CSP violations (something tried to run or load)`);
    assert.deepEqual(errors, [], `${where}: page errors`);
    // Still the app: its header and navigation are there and visible.
    assert.ok(await page.getByRole('navigation', { name: 'Sections' }).isVisible(), `${where}: the page broke`);
  }

  it('the fields the server checks refuse markup, saying which field', async () => {
    const host = await file('ALLOWLIST_EXPANSION', { host: '<img src=x onerror=alert(1)>.example.test', justification: 'x' });
    assert.equal(host.status, 400, JSON.stringify(host.body));
    assert.match(host.body.message!, /payload\.host/);
    const rtlHost = await file('ALLOWLIST_EXPANSION', { host: 'evil\u202Emoc.example.test', justification: 'x' });
    assert.equal(rtlHost.status, 400, JSON.stringify(rtlHost.body));
    const branch = await file('PR_GATEWAY', { branch: 'feature/<svg/onload=alert(1)>', justification: 'x' });
    assert.equal(branch.status, 400, JSON.stringify(branch.body));
    assert.match(branch.body.message!, /payload\.branch/);
    const secret = await file('SECRET_REQUEST', { name: '<script>', justification: 'x' });
    assert.equal(secret.status, 400, JSON.stringify(secret.body));
  });

  it('every free field of every category is shown as text in the list, the modal and the history; nothing runs', async () => {
    // The workspace's own files make the PR's diff: hostile names, markup, bidi and a 200 kB line.
    const made = await server.exec(ws, [
      'sh',
      '-c',
      `printf '%s\\n' "$1" "$2" > "$3" && printf '%s\\n' "$2" > "$4" && head -c 200000 /dev/zero | tr '\\0' 'L' > long.txt && printf '%s\\n' "$1" > "$5"`,
      'sh',
      MARKUP.join('\n'),
      INVISIBLE,
      '<img src=x onerror=alert(12)>.js',
      '\u202Egnp.js',
      '&lt;x&gt;<b onmouseover=alert(13)>bold.md',
    ]);
    assert.equal(made.exitCode, 0, JSON.stringify(made));
    const big = Array.from({ length: 50 }, (_, i) => `${i}:${MARKUP[i % MARKUP.length]!}`.padEnd(16000, '<i>x</i>'));
    assert.equal((await as('admin', 'PUT', '/v1/secrets/HOSTILE_TOKEN', { value: 'v' })).status, 200);
    const filed = {
      allowlist: await file('ALLOWLIST_EXPANSION', { host: 'hostile.example.test', justification: JUSTIFICATION }),
      command: await file('SHELL_COMMAND', {
        command: ['sh', '-c', MARKUP.join('; '), INVISIBLE, ...big],
        cwd: '/workspace/<img src=x onerror=alert(10)>',
        pattern: '<script>window.__pwned=11</script>',
        stdinPreview: JUSTIFICATION.slice(0, 1000),
        stdinBytes: 1000,
        stdinSha256: 'a'.repeat(64),
        justification: LONG_WORD,
      }),
      secret: await file('SECRET_REQUEST', { name: 'HOSTILE_TOKEN', justification: JUSTIFICATION }),
      pr: await file('PR_GATEWAY', { branch: 'feature/hostile', title: MARKUP.join(' ').slice(0, 300), justification: JUSTIFICATION }),
    };
    for (const [k, r] of Object.entries(filed)) {
      assert.equal(r.status, 201, `${k}: ${JSON.stringify(r.body).slice(0, 500)}`);
      ids[k] = r.body.id;
    }

    // The list: one card each, the preview as text.
    await page.getByText('4 requests wait for a decision').waitFor();
    const list = page.getByTestId('pending-list');
    assert.ok((await list.innerText()).includes(JUSTIFICATION.slice(0, 60)), await list.innerText());
    await page.screenshot({ path: join(SHOTS, 'hostile-list.png') });
    await nothingHappened('the list');

    const modal = page.getByTestId('approval-modal');
    const open = async (id: string): Promise<void> => {
      await page.getByRole('button', { name: `Open request ${id}` }).click();
      await modal.waitFor();
    };
    const close = async (): Promise<void> => {
      await modal.getByRole('button', { name: 'Close' }).click();
      await modal.waitFor({ state: 'detached' });
    };
    const justification = async (): Promise<string> => modal.getByTestId('justification').innerText();
    const literal = (text: string, where: string): void => {
      for (const m of MARKUP) assert.ok(text.includes(m), `${where} does not show ${m} as written`);
      assert.ok(text.includes(INVISIBLE_SHOWN), `${where} does not show the bidi and control characters as code points`);
    };

    for (const k of ['allowlist', 'secret', 'pr'] as const) {
      await open(ids[k]!);
      literal(await justification(), `the ${k} justification`);
      await nothingHappened(`the ${k} modal`);
      if (k === 'pr') {
        const diffs = await modal.getByTestId('diff').allInnerTexts();
        const all = diffs.join('\n');
        for (const m of MARKUP) assert.ok(all.includes(`+${m}`), `the diff does not show ${m}`);
        assert.ok(all.includes(`+${INVISIBLE_SHOWN}`), 'the diff does not show the bidi characters as code points');
        assert.ok(all.includes(`+${'L'.repeat(200000)}`), 'the 200 kB line is not shown whole');
        for (const name of ['<img src=x onerror=alert(12)>.js', '⟨U+202E⟩gnp.js', '&lt;x&gt;<b onmouseover=alert(13)>bold.md'])
          await modal.locator('summary').getByText(name, { exact: true }).waitFor();
        assert.ok((await modal.innerText()).includes(`title: ${MARKUP.join(' ').slice(0, 300)}`));
        // The long line scrolls inside its own box: the page does not widen.
        assert.deepEqual(await sideways(), [], 'the page scrolls sideways');
        await page.screenshot({ path: join(SHOTS, 'hostile-pr.png') });
        // Side by side (react-diff-view): the same text, literal, in the new column; nothing runs, nothing widens the page.
        await modal.getByLabel('Side by side').check();
        const splits = modal.getByTestId('split-diff');
        await splits.first().waitFor();
        const inserted = (await splits.locator('td.diff-code-insert').allInnerTexts()).join('\n');
        for (const m of MARKUP) assert.ok(inserted.includes(m), `the side-by-side diff does not show ${m}`);
        assert.ok(inserted.includes(INVISIBLE_SHOWN), 'the side-by-side diff does not show the bidi characters as code points');
        assert.ok(inserted.includes('L'.repeat(200000)), 'the 200 kB line is not shown whole side by side');
        await nothingHappened('the side-by-side diff');
        assert.deepEqual(await sideways(), [], 'the side-by-side diff scrolls the page sideways');
        await modal.getByLabel('Unified').check();
      }
      await close();
    }

    await open(ids.command!);
    assert.equal(await justification(), LONG_WORD);
    const command = await modal.getByTestId('command').innerText();
    assert.ok(command.includes(JSON.stringify(MARKUP.join('; '))), 'the command is not shown as written');
    assert.ok(command.includes(JSON.stringify(INVISIBLE_SHOWN)), "the command's bidi characters are not shown as code points");
    for (const arg of big) assert.ok(command.includes(JSON.stringify(arg)), 'a long argument is not shown whole');
    const shown = await modal.innerText();
    assert.ok(shown.includes('in /workspace/<img src=x onerror=alert(10)>'));
    assert.ok(shown.includes('caught by the pattern <script>window.__pwned=11</script>'));
    literal(await modal.locator('pre').last().innerText(), 'the stdin preview');
    assert.deepEqual(await sideways(), [], 'the page scrolls sideways');
    await page.screenshot({ path: join(SHOTS, 'hostile-command.png') });
    await nothingHappened('the command modal');

    // Decided from the modal: the decision's effect (the branch pushed, or the push's error) is shown as the server recorded it.
    await close();
    await open(ids.pr!);
    await modal.getByLabel(/Reason/).fill('<img src=x onerror=alert(14)> approved');
    await modal.getByRole('button', { name: 'Approve' }).click();
    const effect = modal.getByTestId('modal-effect');
    await modal
      .locator('[data-testid="modal-effect"][data-state="applied"], [data-testid="modal-effect"][data-state="failed"]')
      .waitFor({ timeout: 60_000 });
    const recorded = await as<{ effect: { appliedAt: string | null; error: string | null } }>('lead', 'GET', `/v1/approvals/${ids.pr}`);
    if (recorded.body.effect.error === null) assert.match(await effect.innerText(), /^branch pushed: feature\/hostile to /);
    else assert.equal(await effect.innerText(), `failed: ${recorded.body.effect.error}`);
    assert.match(await modal.getByTestId('modal-status').innerText(), /APPROVED by lead: <img src=x onerror=alert\(14\)> approved/);
    await nothingHappened('the decided modal');
    await close();
    for (const k of ['allowlist', 'command', 'secret'] as const)
      await as('owner', 'POST', `/v1/approvals/${ids[k]}/decision`, { decision: 'REJECT', reason: '<script>alert(15)</script>' });
    await page.getByTestId('none-pending').waitFor();

    // The history: every request, its justification and its effect as text.
    await page.getByRole('navigation').getByRole('link', { name: 'History' }).click();
    const table = page.getByTestId('history');
    for (const id of Object.values(ids)) await page.getByTestId(`history-${id}`).waitFor();
    assert.ok((await table.innerText()).includes(JUSTIFICATION.slice(0, 80)));
    await page.locator(`[data-testid="effect-${ids.pr}"]:is([data-state="applied"], [data-state="failed"])`).waitFor();
    await page.getByRole('button', { name: `Open request ${ids.command}` }).click();
    assert.ok((await modal.getByTestId('modal-status').innerText()).includes('REJECTED by owner: <script>alert(15)</script>'));
    await page.setViewportSize({ width: 360, height: 740 });
    assert.deepEqual(await sideways(), [], 'the page scrolls sideways at 360 px');
    await page.screenshot({ path: join(SHOTS, 'hostile-360px.png') });
    await nothingHappened('the history');
  });

  it("hosts an agent asks its egress proxy for, markup and bidi included, are text in the workshop's egress log", async () => {
    assert.equal(shownAs(INVISIBLE), INVISIBLE_SHOWN, 'shownAs reads as the app shows');
    // Raw CONNECTs to the workshop's proxy, as a hostile agent would write them (python3 in the workshop).
    const py = [
      'import socket,sys',
      'for host in sys.argv[1:]:',
      '  s=socket.create_connection(("127.0.0.1",3128))',
      '  s.sendall(("CONNECT %s:443 HTTP/1.1\\r\\nHost: %s:443\\r\\n\\r\\n" % (host,host)).encode())',
      '  print(s.recv(4096).decode("utf8","replace").split("\\r\\n")[0])',
      '  s.close()',
    ].join('\n');
    const hosts = [
      '<img src=x onerror=alert(16)>',
      'evil\u202Emoc.example.test',
      '<svg/onload=alert(17)>.example.test',
      'xn--80ak6aa92e.com',
    ];
    const tried = await server.exec(ws, ['/usr/bin/python3', '-c', py, ...hosts]);
    assert.equal(tried.exitCode, 0, JSON.stringify(tried));
    const log = await as<{ items: { host: string; message: string; reason: string }[] }>(
      'owner',
      'GET',
      `/v1/workshops/${ws}/egress?limit=200`,
    );
    const hostile = log.body.items.filter((r) => /[<\u202E]/.test(r.host + r.message));
    assert.ok(hostile.length > 0, `the proxy recorded none of the hostile hosts: ${JSON.stringify(log.body.items)}`);

    // The previous test left a request's modal open.
    const modal = page.getByTestId('approval-modal');
    if (await modal.count()) await modal.getByRole('button', { name: 'Close' }).click();
    await page.getByRole('navigation').getByRole('link', { name: 'Workshops' }).click();
    await page.getByRole('link', { name: 'hostile', exact: true }).click();
    const table = page.getByTestId('egress-log');
    await table.waitFor();
    for (const r of hostile) {
      const text = await table.innerText();
      assert.ok(text.includes(shownAs(r.host)), `the log does not show the host ${JSON.stringify(r.host)} as text`);
      assert.ok(text.includes(shownAs(r.message || r.reason)), `the log does not show ${JSON.stringify(r.message)} as text`);
    }
    await table.scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SHOTS, 'hostile-egress-log.png') });
    await nothingHappened("the workshop's egress log");
  });

  it("a project whose directory name and atelier.yaml hold markup is text in the cockpit's catalog and plan", async () => {
    // A directory name cannot hold '/', so the payloads without one; the file holds them all.
    const dir = join(projectParent, `${MARKUP[1]} ${INVISIBLE}`);
    mkdirSync(dir);
    const comments = [MARKUP.slice(0, 5), MARKUP.slice(5, 10), MARKUP.slice(10), [INVISIBLE, LONG_WORD]].map((l) => `# ${l.join(' ')}`);
    writeFileSync(
      join(dir, 'atelier.yaml'),
      ['# settings', comments[0], comments[1], 'egress:', '  allow: [api.stripe.com]', comments[2], comments[3], ''].join('\n'),
    );
    const added = await as('admin', 'POST', '/v1/projects', { path: dir, name: 'hostile-project' });
    assert.equal(added.status, 201, JSON.stringify(added.body));

    await page.getByRole('navigation').getByRole('link', { name: 'Cockpit' }).click();
    await page.getByTestId('project-select').selectOption('hostile-project');
    assert.equal(await page.getByTestId('project-path').innerText(), shownAs(dir));
    const allow = page.getByTestId('action-egress.allow');
    assert.ok((await allow.innerText()).includes(shownAs(dir)), 'the precondition names the directory as text');
    await allow.getByRole('button', { name: /^Choose/ }).click();
    const panel = page.getByTestId('action-panel');
    await panel.getByLabel(/^entry/).fill('api.example.com');
    await panel.getByRole('button', { name: 'Plan' }).click();
    const diff = await panel.getByTestId('plan-diff').innerText();
    for (const c of comments)
      assert.ok(diff.includes(shownAs(c)), `the plan's diff does not show ${JSON.stringify(c.slice(0, 80))} as text`);
    await page.screenshot({ path: join(SHOTS, 'hostile-cockpit.png') });
    await nothingHappened("the cockpit's catalog and plan");
    assert.deepEqual(await sideways(), [], 'the page scrolls sideways');
    await page.setViewportSize({ width: 360, height: 740 });
    assert.deepEqual(await sideways(), [], 'the page scrolls sideways at 360 px');
    await page.setViewportSize({ width: 1100, height: 800 });
  });
});
