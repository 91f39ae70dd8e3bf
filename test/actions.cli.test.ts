// Typed actions end to end: the real CLI against a real `atelier server start`, on real project
// directories; and the write guard for requests that come from a browser.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TestServer } from './helpers/server.js';

const SETTINGS = `# my shop
egress:
  allow: [api.stripe.com]   # payments

slots: []
`;

function projectDir(content?: string): string {
  const dir = mkdtempSync('/tmp/atelier-actions-cli-');
  if (content !== undefined) writeFileSync(join(dir, 'atelier.yaml'), content);
  return dir;
}

describe('atelier projects and actions (CLI)', () => {
  let s: TestServer;
  const dirs: string[] = [];

  before(async () => {
    s = await TestServer.start();
  });
  after(async () => {
    await s?.dispose();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const json = async <T>(args: string[]): Promise<T> => {
    const r = await s.cli(['-o', 'json', ...args]);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };

  it('projects add registers a directory and writes atelier.yaml with commented defaults when absent', async () => {
    const dir = projectDir();
    dirs.push(dir);
    const r = await json<{ project: { name: string; path: string }; created: boolean }>(['projects', 'add', dir, '--name', 'blank']);
    assert.equal(r.created, true);
    assert.match(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), /^# atelier.yaml/);
    assert.equal(readFileSync(join(dir, '.atelier/runtime/.gitignore'), 'utf8').includes('\n*\n'), true);
    const list = await json<{ name: string }[]>(['projects', 'list']);
    assert.ok(list.some((p) => p.name === 'blank'));
    const again = await s.cli(['projects', 'add', dir, '--name', 'blank']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /already registered.*ALREADY_EXISTS/);
  });

  it('list, plan, apply, journal and rollback a class A action', async () => {
    const dir = projectDir(SETTINGS);
    dirs.push(dir);
    await json(['projects', 'add', dir, '--name', 'shop']);

    const catalog = await json<{ id: string; class: string; preconditions: { ok: boolean }[] }[]>(['actions', 'list', '--project', 'shop']);
    assert.ok(catalog.find((a) => a.id === 'egress.allow')?.preconditions.every((p) => p.ok));
    const table = await s.cli(['actions', 'list', '--project', 'shop']);
    assert.match(table.stdout, /extras.install-command\s+C/);

    const plan = await json<{ planId: string; fingerprint: string; expiresAt: string; effects: { kind: string; diff: string }[] }>([
      'actions',
      'plan',
      'egress.allow',
      '--project',
      'shop',
      '--param',
      'entry=api.example.com:8443',
    ]);
    assert.match(plan.planId, /^plan-/);
    assert.match(plan.fingerprint, /^sha256:/);
    assert.ok(Date.parse(plan.expiresAt) > Date.now());
    assert.match(plan.effects[0]!.diff, /^\+ {2}allow: \[api.stripe.com, "?api.example.com:8443"?\] {3}# payments$/m);
    assert.equal(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), SETTINGS, 'plan writes nothing');

    const unconfirmed = await s.cli(['actions', 'apply', plan.planId]);
    assert.equal(unconfirmed.code, 1);
    assert.match(unconfirmed.stderr, /--yes/);
    assert.equal(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), SETTINGS);

    const x = await json<{ executionId: string; status: string }>(['actions', 'apply', plan.planId, '--yes']);
    assert.equal(x.status, 'applied');
    assert.match(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), /allow: \[api.stripe.com, "?api.example.com:8443"?\] {3}# payments/);

    const human = await s.cli(['actions', 'journal', '--project', 'shop']);
    assert.match(human.stdout, new RegExp(`${x.executionId}\\s+egress.allow\\s+applied`));

    const back = await json<{ executionId: string; status: string }>(['actions', 'rollback', x.executionId]);
    assert.equal(back.status, 'rolled_back');
    assert.equal(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), SETTINGS);

    const journal = await json<{ executions: { executionId: string; status: string }[] }>(['actions', 'journal', '--project', 'shop']);
    assert.equal(journal.executions.find((e) => e.executionId === x.executionId)?.status, 'rolled_back');
  });

  it('a viewer reads plans, journal and executions of simulators.compose without ever seeing a redacted value', async () => {
    const dir = projectDir(`${SETTINGS}simulators:\n  - name: postgres\n    env:\n      POSTGRES_PASSWORD: was-Secret-0\n`);
    dirs.push(dir);
    await json(['projects', 'add', dir, '--name', 'vault']);
    assert.equal((await s.api('POST', '/v1/users', { name: 'peeker', role: 'viewer' })).status, 201);
    const viewer = (await s.api<{ token: string }>('POST', '/v1/tokens', { user: 'peeker', expiresInSeconds: 600 })).body.token;
    const asViewer = async (path: string): Promise<string> => {
      const r = await s.api('GET', path, undefined, { authorization: `Bearer ${viewer}` });
      assert.equal(r.status, 200, `${path}: ${JSON.stringify(r.body)}`);
      return JSON.stringify(r.body);
    };
    const simulators = JSON.stringify([{ name: 'postgres', env: { POSTGRES_PASSWORD: 'now-Secret-1' } }]);
    const plan = await json<{ planId: string; effects: { diff: string }[] }>([
      'actions',
      'plan',
      'simulators.compose',
      '--project',
      'vault',
      '--param',
      `simulators=${simulators}`,
    ]);
    assert.match(plan.effects[0]!.diff, /^\+ {6}POSTGRES_PASSWORD: \(redacted\)$/m, plan.effects[0]!.diff);
    const x = await json<{ executionId: string; status: string }>(['actions', 'apply', plan.planId, '--yes']);
    assert.equal(x.status, 'applied');
    const seen = [
      JSON.stringify(plan),
      JSON.stringify(x),
      await asViewer(`/api/workspace/actions/plans/${plan.planId}`),
      await asViewer('/api/workspace/actions/journal?project=vault'),
      await asViewer(`/api/workspace/actions/executions/${x.executionId}`),
      (await s.cli(['actions', 'journal', '--project', 'vault'], { env: { ATELIER_TOKEN: viewer } })).stdout,
      readFileSync(join(dir, '.atelier/runtime/actions/journal.jsonl'), 'utf8'),
    ];
    for (const text of seen)
      for (const secret of ['was-Secret-0', 'now-Secret-1']) assert.ok(!text.includes(secret), `${secret} in ${text.slice(0, 200)}`);
    assert.match(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), /POSTGRES_PASSWORD: now-Secret-1/);
  });

  it('reports an interrupted execution and a torn last line from the journal', async () => {
    const dir = projectDir(SETTINGS);
    dirs.push(dir);
    await json(['projects', 'add', dir, '--name', 'crashed']);
    const journal = join(dir, '.atelier/runtime/actions/journal.jsonl');
    const started = {
      at: new Date().toISOString(),
      event: 'apply_started',
      executionId: 'exec-crashed0000',
      planId: 'plan-crashed0000',
      actionId: 'slots.assign',
      class: 'A',
      project: 'crashed',
      fingerprint: 'sha256:0',
      actor: 'admin',
      parameters: { slot: 'x' },
      inverse: { kind: 'restore-file', path: 'atelier.yaml', snapshot: null, beforeSha256: null, afterSha256: '0' },
    };
    appendFileSync(journal, `${JSON.stringify(started)}\n{"at":"2026-`);
    const r = await s.cli(['actions', 'journal', '--project', 'crashed']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /exec-crashed0000\s+slots.assign\s+interrupted/);
    assert.match(r.stdout, /atelier actions rollback exec-crashed0000/);
    assert.match(r.stdout, /last journal line was cut/);
  });

  it('class C prints the install command and has no apply', async () => {
    const dir = projectDir(SETTINGS);
    dirs.push(dir);
    await json(['projects', 'add', dir, '--name', 'extras']);
    const r = await s.cli(['actions', 'plan', 'extras.install-command', '--project', 'extras', '--param', 'component=java']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Atelier never runs it/);
    assert.match(r.stdout, /apt-get install -y --no-install-recommends openjdk-17-jre-headless/);
    const plan = JSON.parse(
      (await s.cli(['-o', 'json', 'actions', 'plan', 'extras.install-command', '--project', 'extras', '--param', 'component=java'])).stdout,
    ) as { planId: string; fingerprint: string };
    const apply = await s.api<{ code: string }>('POST', '/api/workspace/actions/extras.install-command/apply', {
      plan_id: plan.planId,
      fingerprint: plan.fingerprint,
    });
    assert.equal(apply.status, 422);
    assert.equal(apply.body.code, 'UNSUPPORTED');
  });

  it('bad parameters get a clear error naming the parameter; commands and paths are never accepted', async () => {
    const dir = projectDir(SETTINGS);
    dirs.push(dir);
    await json(['projects', 'add', dir, '--name', 'strict']);
    const bad = await s.cli(['actions', 'plan', 'simulators.compose', '--project', 'strict', '--param', 'simulators=[{"name":"pg"']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--param simulators: not valid JSON/);
    const extra = await s.api<{ code: string; details: { field: string } }>('POST', '/api/workspace/actions/egress.allow/plan', {
      project: 'strict',
      parameters: { entry: 'a.com', command: ['rm', '-rf', '/'] },
    });
    assert.equal(extra.status, 400);
    assert.equal(extra.body.code, 'INVALID_ARGUMENT');
    const path = await s.api<{ code: string }>('POST', '/api/workspace/actions/egress.allow/plan', {
      project: 'strict',
      path: '/etc/passwd',
      parameters: { entry: 'a.com' },
    });
    assert.equal(path.status, 400);
    const unknown = await s.cli(['actions', 'plan', 'stack.nuke', '--project', 'strict']);
    assert.match(unknown.stderr, /no action stack.nuke.*ACTION_NOT_FOUND/);
  });

  it('by default a browser gets the CLI command to copy instead of an apply', async () => {
    const dir = projectDir(SETTINGS);
    dirs.push(dir);
    await json(['projects', 'add', dir, '--name', 'guarded']);
    const plan = await json<{ planId: string; fingerprint: string }>([
      'actions',
      'plan',
      'slots.assign',
      '--project',
      'guarded',
      '--param',
      'slot=s1',
    ]);
    const r = await s.api<{ code: string; details: { command: string } }>(
      'POST',
      '/api/workspace/actions/slots.assign/apply',
      { plan_id: plan.planId, fingerprint: plan.fingerprint },
      { origin: s.url },
    );
    assert.equal(r.status, 403);
    assert.equal(r.body.code, 'WRITES_COPY_COMMAND');
    assert.equal(r.body.details.command, `atelier actions apply ${plan.planId}`);
    assert.equal(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), SETTINGS);
  });
});

describe('the cockpit write guard (ATELIER_COCKPIT_WRITES=apply)', () => {
  let s: TestServer;
  const dir = projectDir(SETTINGS);

  before(async () => {
    s = await TestServer.start({ env: { ATELIER_COCKPIT_WRITES: 'apply' } });
    assert.equal((await s.api('POST', '/v1/projects', { path: dir, name: 'cockpit' })).status, 201);
  });
  after(async () => {
    await s?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a browser gets its CSRF token from GET /api/workspace/csrf; a write must be same-origin and send it back as cookie and header', async () => {
    const plan = await s.api<{ planId: string; fingerprint: string }>('POST', '/api/workspace/actions/slots.assign/plan', {
      project: 'cockpit',
      parameters: { slot: 's1' },
    });
    assert.equal(plan.status, 201);
    const body = { plan_id: plan.body.planId, fingerprint: plan.body.fingerprint };
    const apply = (headers: Record<string, string>) =>
      s.api<{ code: string; status?: string; message?: string }>('POST', '/api/workspace/actions/slots.assign/apply', body, headers);

    // What a page does first: the token comes in a cookie (SameSite=Strict, HttpOnly) and in the body, for the header.
    const res = await fetch(`${s.url}/api/workspace/csrf`, { headers: { authorization: `Bearer ${s.token}`, origin: s.url } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('cache-control'), 'no-store');
    const setCookie = res.headers.getSetCookie();
    assert.equal(setCookie.length, 1);
    assert.match(setCookie[0]!, /^atelier_csrf=[^;]+; Path=\/; Max-Age=43200; SameSite=Strict; HttpOnly$/);
    const cookie = setCookie[0]!.split(';')[0]!;
    const issued = (await res.json()) as { token: string; header: string };
    assert.equal(issued.header, 'x-atelier-csrf');
    assert.equal(cookie, `atelier_csrf=${issued.token}`);
    const token = issued.token;

    // Each refusal changes nothing.
    const cross = await apply({ origin: 'https://evil.example', cookie, 'x-atelier-csrf': token });
    assert.equal(cross.status, 403);
    assert.match(JSON.stringify(cross.body), /cross-origin/);
    const noOrigin = await apply({ cookie, 'x-atelier-csrf': token });
    assert.equal(noOrigin.status, 403);
    const noHeader = await apply({ origin: s.url, cookie });
    assert.equal(noHeader.status, 403);
    assert.match(JSON.stringify(noHeader.body), /GET \/api\/workspace\/csrf/);
    const noCookie = await apply({ origin: s.url, 'x-atelier-csrf': token });
    assert.equal(noCookie.status, 403);
    const mismatch = await apply({ origin: s.url, cookie, 'x-atelier-csrf': `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}` });
    assert.equal(mismatch.status, 403);
    // A cookie and header that match but were not issued by this server (cookie tossing from a sibling site).
    const forged = await apply({ origin: s.url, cookie: 'atelier_csrf=t0k', 'x-atelier-csrf': 't0k' });
    assert.equal(forged.status, 403);
    const [exp, nonce] = token.split('.');
    const tossed = `${exp}.${nonce}.${'A'.repeat(43)}`;
    const wrongMac = await apply({ origin: s.url, cookie: `atelier_csrf=${tossed}`, 'x-atelier-csrf': tossed });
    assert.equal(wrongMac.status, 403);
    assert.match(JSON.stringify(wrongMac.body), /not yours or has expired/);
    // Another user's token (a maintainer of the same tenant) is not this user's.
    assert.equal((await s.cli(['users', 'add', 'csrf-other', '--role', 'maintainer'])).code, 0);
    const other = await s.api<{ token: string }>('POST', '/v1/tokens', { name: 'csrf-other', user: 'csrf-other', role: 'maintainer' });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    const theirs = (await (
      await fetch(`${s.url}/api/workspace/csrf`, { headers: { authorization: `Bearer ${other.body.token}` } })
    ).json()) as { token: string };
    const borrowed = await apply({ origin: s.url, cookie: `atelier_csrf=${theirs.token}`, 'x-atelier-csrf': theirs.token });
    assert.equal(borrowed.status, 403);
    assert.match(JSON.stringify(borrowed.body), /not yours/);
    assert.equal(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), SETTINGS);

    const ok = await apply({ origin: s.url, cookie, 'x-atelier-csrf': token, 'sec-fetch-site': 'same-origin' });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.status, 'applied');
    assert.match(readFileSync(join(dir, 'atelier.yaml'), 'utf8'), /slots: \[s1\]/);
  });
});
