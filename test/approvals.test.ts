import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { join } from 'node:path';
import WebSocket from 'ws';
import { actors } from './helpers/actors.js';
import { TestServer, makeRepo, runCli } from './helpers/server.js';

// Approvals on one server with a real workshop: an agent (its workshop token, from outside)
// files requests; people decide with the real CLI; the egress proxy's held request goes through
// once a human approves the host, and the approved entry survives a restart.
const ORIGIN = '127.0.0.4';
const PORT = 18190;

interface Approval {
  id: string;
  status: string;
  workshopId: string;
  category: string;
  payload: Record<string, unknown>;
  decidedBy: string | null;
  effect: { appliedAt: string | null; error: string | null };
}

describe('approvals', () => {
  let server: TestServer;
  let dir: string;
  let repo: string;
  let ws: string;
  let origin: Server;
  const { tokens, as, cliAs, workshopWithAgent } = actors(() => server);
  const file = (who: string, category: string, payload: Record<string, unknown>) =>
    as<Approval>(who, 'POST', `/v1/workshops/${ws}/approvals`, { category, payload });

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-approvals-');
    origin = createServer((req, res) => res.end(`origin says hi to ${req.headers.host ?? '?'}\n`));
    await new Promise<void>((r) => origin.listen(PORT, ORIGIN, r));
    const hosts = join(dir, 'hosts');
    writeFileSync(hosts, `${ORIGIN} asked.test refused.test\n`);
    server = await TestServer.start({
      env: {
        ATELIER_EGRESS_HOSTS: hosts,
        ATELIER_EGRESS_ALLOW_RANGES: `${ORIGIN}/32`,
        ATELIER_EGRESS_DEFAULTS: 'none',
        ATELIER_EGRESS_DNS: '127.0.0.1',
      },
    });
    tokens.admin = server.token;
    for (const [name, role] of [
      ['owner', 'member'],
      ['mate', 'member'],
      ['lead', 'maintainer'],
      ['watcher', 'viewer'],
    ] as const) {
      assert.equal((await as('admin', 'POST', '/v1/users', { name, role })).status, 201);
      const t = await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: name, expiresInSeconds: 3600 });
      tokens[name] = t.body.token;
    }
    const other = await as('admin', 'POST', '/v1/users', { name: 'stranger', role: 'admin', tenant: 'other' });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    tokens.stranger = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: 'stranger', tenant: 'other' })).body.token;
    repo = makeRepo({ 'atelier.yaml': 'egress:\n  allow: []\n  askHoldSeconds: 60\n' });
    ws = await workshopWithAgent(repo, 'hitl');
  });

  after(async () => {
    await server?.dispose();
    origin?.close();
    rmSync(dir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('an agent files a request; its long poll returns the moment the owner approves from the CLI', async () => {
    const r = await file('agent', 'ALLOWLIST_EXPANSION', { host: 'API.Stripe.com', justification: 'charge the test card' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.status, 'PENDING');
    assert.equal(r.body.payload.host, 'api.stripe.com');
    assert.equal(r.body.payload.entry, 'api.stripe.com');
    const id = r.body.id;

    const list = await cliAs('owner', ['approvals', 'list']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, new RegExp(`${id}.*ALLOWLIST_EXPANSION.*PENDING.*reach api\\.stripe\\.com`));

    const waiting = as<Approval>('agent', 'GET', `/v1/approvals/${id}/wait?timeout=60`);
    // The agent's wait is in place; an agent can never decide, not even its own request.
    const self = await as<{ code: string }>('agent', 'POST', `/v1/approvals/${id}/decision`, { decision: 'APPROVE', reason: 'me' });
    assert.equal(self.status, 403);
    const approve = await cliAs('owner', ['approve', id, '--reason', 'the test account only']);
    assert.equal(approve.code, 0, approve.stderr);
    assert.match(approve.stdout, /status:\s+APPROVED/);
    const waited = await waiting;
    assert.equal(waited.status, 200);
    assert.equal(waited.body.status, 'APPROVED');
    assert.equal(waited.body.decidedBy, 'owner');

    // A second decision is refused with the state as it is.
    const again = await as<{ code: string; details: { approval: Approval } }>('lead', 'POST', `/v1/approvals/${id}/decision`, {
      decision: 'REJECT',
      reason: 'too late',
    });
    assert.equal(again.status, 409);
    assert.equal(again.body.code, 'CONFLICT');
    assert.equal(again.body.details.approval.status, 'APPROVED');
    const json = await cliAs('owner', ['approvals', 'show', id, '-o', 'json']);
    assert.equal((JSON.parse(json.stdout) as Approval).status, 'APPROVED');
  });

  it('only the owner or a maintainer decides; never the requester, a viewer, a non-owner member or another tenant', async () => {
    // Filed by the owner herself (a person, not the agent): she may not approve it.
    const mine = await file('owner', 'ALLOWLIST_EXPANSION', { host: 'example.org', justification: 'docs' });
    assert.equal(mine.status, 201, JSON.stringify(mine.body));
    const id = mine.body.id;
    const decide = (who: string) =>
      as<{ code: string; message: string }>(who, 'POST', `/v1/approvals/${id}/decision`, { decision: 'APPROVE', reason: 'ok' });
    const own = await decide('owner');
    assert.equal(own.status, 403);
    assert.match(own.body.message, /you filed this request/);
    assert.equal((await decide('mate')).status, 403);
    assert.equal((await decide('watcher')).status, 403);
    assert.equal((await decide('stranger')).status, 404);
    assert.equal((await as('stranger', 'GET', `/v1/approvals/${id}`)).status, 404);
    const list = await as<{ items: Approval[] }>('stranger', 'GET', '/v1/approvals?status=PENDING');
    assert.ok(!list.body.items.some((a) => a.id === id));
    // Still pending after all of that; the maintainer's decision is the one that counts.
    assert.equal((await as<Approval>('owner', 'GET', `/v1/approvals/${id}`)).body.status, 'PENDING');
    const reject = await cliAs('lead', ['approvals', 'reject', id, '--reason', 'not needed']);
    assert.equal(reject.code, 0, reject.stderr);
    assert.equal((await as<Approval>('owner', 'GET', `/v1/approvals/${id}`)).body.status, 'REJECTED');
  });

  it('bad input gets clear errors and changes nothing', async () => {
    const before = (await as<{ items: Approval[] }>('admin', 'GET', '/v1/approvals?limit=1000')).body.items.length;
    const cases: [unknown, number, RegExp][] = [
      [{ category: 'NUKE', payload: { justification: 'x' } }, 400, /category must be one of/],
      [{ category: 'ALLOWLIST_EXPANSION', payload: { host: 'a.example' } }, 400, /justification/],
      [{ category: 'ALLOWLIST_EXPANSION', payload: { host: 'a..b', justification: 'x' } }, 400, /payload.host/],
      [{ category: 'ALLOWLIST_EXPANSION', payload: { host: '*', justification: 'x' } }, 400, /payload/],
      [{ category: 'ALLOWLIST_EXPANSION', payload: { host: 'a.example', justification: 'x', extra: 1 } }, 400, /payload/],
      [{ category: 'ALLOWLIST_EXPANSION', payload: 'host' }, 400, /payload/],
    ];
    for (const [body, status, message] of cases) {
      const r = await as<{ message: string }>('agent', 'POST', `/v1/workshops/${ws}/approvals`, body);
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.match(r.body.message, message);
    }
    // 10 MB announced: the server answers 413 from the Content-Length alone. The body is not sent:
    // sending it raced the server's close (EPIPE before the answer could be read, under load).
    const hugeStatus = await new Promise<number>((resolve, reject) => {
      const req = request(`${server.url}/v1/workshops/${ws}/approvals`, {
        method: 'POST',
        headers: { authorization: `Bearer ${tokens.agent}`, 'content-type': 'application/json', 'content-length': 10 << 20 },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
        req.destroy();
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    assert.equal(hugeStatus, 413);
    assert.equal((await as('agent', 'GET', '/v1/approvals/00000000-0000-0000-0000-000000000000')).status, 404);
    assert.equal((await as('agent', 'GET', '/v1/approvals/not-a-uuid')).status, 404);
    assert.equal((await as('owner', 'POST', '/v1/approvals/not-a-uuid/decision', { decision: 'APPROVE', reason: 'x' })).status, 404);
    assert.equal((await as('owner', 'POST', '/v1/approvals/not-a-uuid/decision', { decision: 'MAYBE', reason: 'x' })).status, 400);
    assert.equal((await as('owner', 'GET', '/v1/approvals?status=MAYBE')).status, 400);
    assert.equal((await as('owner', 'GET', '/v1/approvals/x/wait?timeout=9999')).status, 400);
    assert.equal(
      (
        await as('watcher', 'POST', `/v1/workshops/${ws}/approvals`, {
          category: 'ALLOWLIST_EXPANSION',
          payload: { host: 'a.example', justification: 'x' },
        })
      ).status,
      403,
    );
    assert.equal(
      (
        await as('owner', 'POST', '/v1/workshops/ws-00000000/approvals', {
          category: 'ALLOWLIST_EXPANSION',
          payload: { host: 'a.example', justification: 'x' },
        })
      ).status,
      404,
    );
    const after = (await as<{ items: Approval[] }>('admin', 'GET', '/v1/approvals?limit=1000')).body.items.length;
    assert.equal(after, before);
  });

  it('streams created and decided events over a WebSocket to the tenant only', async () => {
    const open = (who: string) =>
      new Promise<{ socket: WebSocket; events: { type: string; approval?: Approval }[] }>((resolve, reject) => {
        const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/approvals/stream`, {
          headers: { authorization: `Bearer ${tokens[who]}` },
        });
        const events: { type: string; approval?: Approval }[] = [];
        socket.on('message', (d) => {
          const e = JSON.parse(String(d)) as { type: string; approval?: Approval };
          events.push(e);
          if (e.type === 'ready') resolve({ socket, events });
        });
        socket.on('error', reject);
      });
    const mine = await open('watcher');
    const theirs = await open('stranger');
    const r = await file('agent', 'ALLOWLIST_EXPANSION', { host: 'ws.example', justification: 'stream test' });
    const d = await as('lead', 'POST', `/v1/approvals/${r.body.id}/decision`, { decision: 'REJECT', reason: 'no' });
    assert.equal(d.status, 200);
    const until = Date.now() + 10_000;
    while (mine.events.filter((e) => e.approval?.id === r.body.id).length < 2 && Date.now() < until)
      await new Promise((x) => setTimeout(x, 20));
    const seen = mine.events.filter((e) => e.approval?.id === r.body.id).map((e) => `${e.type}:${e.approval!.status}`);
    assert.deepEqual(seen, ['created:PENDING', 'decided:REJECTED']);
    assert.equal(theirs.events.filter((e) => e.type !== 'ready').length, 0);
    mine.socket.close();
    theirs.socket.close();
    // Unauthenticated: refused before any upgrade.
    const refused = await new Promise<number>((resolve) => {
      const s = new WebSocket(`${server.url.replace('http', 'ws')}/v1/approvals/stream`);
      s.on('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0));
      s.on('error', () => resolve(-1));
    });
    assert.equal(refused, 401);
  });

  it('an unknown host is held, filed by the proxy, and let through once approved; the entry survives a restart', async () => {
    const curl = (host: string, extra = '') =>
      server.exec(ws, ['sh', '-c', `curl -sS -m 90 ${extra} -o /dev/null -w '%{http_code}' -D - http://${host}:${PORT}/`]);
    const held = curl('asked.test');
    let pending: Approval | undefined;
    const until = Date.now() + 30_000;
    while (!pending && Date.now() < until) {
      const l = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=ALLOWLIST_EXPANSION&workshop=${ws}`);
      pending = l.body.items.find((a) => a.payload.host === 'asked.test');
      if (!pending) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(pending, 'the proxy filed a request');
    assert.equal(pending.payload.entry, `asked.test:${PORT}`);
    const ok = await cliAs('owner', ['approvals', 'approve', pending.id, '--reason', 'fine']);
    assert.equal(ok.code, 0, ok.stderr);
    const r = await held;
    assert.match(r.stdout, /200$/, r.stdout + r.stderr);
    // Now in the workshop's policy: no new request, allowed by the entry, also after a restart.
    const until2 = Date.now() + 10_000;
    let applied: Approval | undefined;
    while (Date.now() < until2) {
      applied = (await as<Approval>('owner', 'GET', `/v1/approvals/${pending.id}`)).body;
      if (applied.effect.appliedAt) break;
      await new Promise((x) => setTimeout(x, 50));
    }
    assert.ok(applied?.effect.appliedAt, 'effect recorded');
    assert.equal(applied.effect.error, null);
    await server.stop();
    await server.boot();
    const direct = await curl('asked.test');
    assert.match(direct.stdout, /200$/, direct.stdout + direct.stderr);
    const egress = await as<{ items: { host: string; reason: string; entry: string }[] }>(
      'owner',
      'GET',
      `/v1/workshops/${ws}/egress?limit=1000`,
    );
    const last = egress.body.items.filter((d) => d.host === 'asked.test').at(-1);
    assert.equal(last?.reason, 'ALLOW_LISTED');
    assert.equal(last?.entry, `asked.test:${PORT}`);
  });

  it('a rejected host is answered 403 with the approval id', async () => {
    // Through the CLI: the terminal that runs the command is told what waits and how to approve it.
    const held = server.cli(['exec', ws, '--', 'sh', '-c', `curl -sS -m 90 -o /dev/null -D - http://refused.test:${PORT}/`]);
    let pending: Approval | undefined;
    const until = Date.now() + 30_000;
    while (!pending && Date.now() < until) {
      const l = await as<{ items: Approval[] }>('lead', 'GET', `/v1/approvals?status=PENDING&workshop=${ws}`);
      pending = l.body.items.find((a) => a.payload.host === 'refused.test');
      if (!pending) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(pending);
    assert.equal((await cliAs('lead', ['approvals', 'reject', pending.id, '--reason', 'exfiltration risk'])).code, 0);
    const r = await held;
    assert.match(
      r.stderr,
      new RegExp(
        `waiting for approval of ALLOWLIST_EXPANSION refused\\.test:${PORT} \\(request ${pending.id}\\): run \`atelier approve ${pending.id}\``,
      ),
    );
    assert.match(r.stdout, /^HTTP\/1\.1 403/m);
    assert.match(r.stdout, new RegExp(`^x-atelier-approval: ${pending.id}`, 'mi'));
    assert.match(r.stdout, /^x-atelier-egress-reason: ASK_DENIED/im);
  });

  it('a command named in approvals.commands runs only once approved, and never when rejected', async () => {
    const guarded = makeRepo({ 'atelier.yaml': 'approvals:\n  commands: ["touch /workspace/gated*", "git push*"]\n' });
    try {
      const w = await as<{ id: string; status: string; statusReason: string }>('owner', 'POST', '/v1/workshops', {
        repo: guarded,
        name: 'gated',
      });
      assert.equal(w.body.status, 'Running', w.body.statusReason);
      const id = w.body.id;
      const agentToken = (await as<{ token: string }>('owner', 'POST', '/v1/tokens', { workshopId: id, expiresInSeconds: 600 })).body.token;
      const exists = async (f: string) => (await server.exec(id, ['test', '-e', `/workspace/${f}`])).exitCode === 0;
      // Not named: runs at once.
      assert.equal((await server.exec(id, ['touch', '/workspace/free'])).exitCode, 0);
      // Named (also inside sh -c): the agent's terminal waits and says so.
      const run = server.cli(['exec', id, '--', 'sh', '-c', 'echo start && touch /workspace/gated-1'], {
        env: { ATELIER_TOKEN: agentToken },
      });
      let pending: Approval | undefined;
      const until = Date.now() + 30_000;
      while (!pending && Date.now() < until) {
        const l = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${id}`);
        pending = l.body.items[0];
        if (!pending) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(pending, 'the exec filed a SHELL_COMMAND request');
      assert.equal(pending.payload.pattern, 'touch /workspace/gated*');
      assert.equal(await exists('gated-1'), false, 'nothing ran before the decision');
      assert.equal((await cliAs('owner', ['approve', pending.id, '--reason', 'fine'])).code, 0);
      const r = await run;
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, new RegExp(`waiting for approval .*request ${pending.id}.*atelier approve ${pending.id}`));
      assert.equal(r.stdout, 'start\n');
      assert.equal(await exists('gated-1'), true);
      // Rejected: never runs; the caller is told it was rejected.
      const agentCall = server.api<{ code: string; message: string }>(
        'POST',
        `/v1/workshops/${id}/exec`,
        { command: ['touch', '/workspace/gated-2'] },
        {
          authorization: `Bearer ${agentToken}`,
        },
      );
      let second: Approval | undefined;
      while (!second && Date.now() < until + 30_000) {
        const l = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${id}`);
        second = l.body.items[0];
        if (!second) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(second);
      assert.equal((await cliAs('lead', ['approvals', 'reject', second.id, '--reason', 'no'])).code, 0);
      const res = await agentCall;
      assert.equal(res.status, 403, JSON.stringify(res.body));
      assert.match(res.body.message, /rejected/);
      assert.equal(await exists('gated-2'), false);
      await as('owner', 'DELETE', `/v1/workshops/${id}`);
    } finally {
      rmSync(guarded, { recursive: true, force: true });
    }
  });

  it('gates a command however it is spelled, and lets similar commands through', async () => {
    const guarded = makeRepo({ 'atelier.yaml': 'approvals:\n  commands: ["git push*", "rm -rf *"]\n' });
    try {
      const w = await as<{ id: string; status: string; statusReason: string }>('owner', 'POST', '/v1/workshops', {
        repo: guarded,
        name: 'spellings',
      });
      assert.equal(w.body.status, 'Running', w.body.statusReason);
      const id = w.body.id;
      const agentToken = (await as<{ token: string }>('owner', 'POST', '/v1/tokens', { workshopId: id, expiresInSeconds: 600 })).body.token;
      const asAgent = <T>(body: unknown) =>
        server.api<T>('POST', `/v1/workshops/${id}/exec`, body, { authorization: `Bearer ${agentToken}` });
      const sh = (script: string): string[] => ['sh', '-c', script];
      const gated: string[][] = [
        sh('git  push'),
        ['/usr/bin/git', 'push'],
        ['env', 'git', 'push'],
        ['env', 'FOO=1', 'git', 'push', 'origin'],
        ['git', '-C', '.', 'push'],
        ['git', '-c', 'user.name=x', 'push'],
        ['git', '--no-pager', 'push'],
        ['command', 'git', 'push'],
        ['nice', '-n', '5', 'git', 'push'],
        ['time', 'git', 'push'],
        ['timeout', '30', 'git', 'push'],
        sh('exec git push'),
        sh('cd /workspace && git push'),
        sh('echo $(git push)'),
        sh("'git' push"),
        ['rm', '-r', '-f', '/workspace/v1'],
        ['rm', '-fr', '/workspace/v2'],
        ['rm', '--recursive', '--force', '/workspace/v3'],
        ['/bin/rm', '-rf', '/workspace/v4'],
        sh('true; rm -rf /workspace/v5'),
        ['bash', '-c', 'rm -r -f /workspace/v6 || true'],
        ['sh'],
      ];
      const stdinOf = (c: string[]) => (c.length === 1 ? { stdin: Buffer.from('rm -rf /workspace/v7\n').toString('base64') } : {});
      for (let i = 1; i <= 7; i++) assert.equal((await server.exec(id, ['mkdir', `/workspace/v${i}`])).exitCode, 0);
      // Similar commands that run neither: at once, no request filed.
      for (const command of [['git', 'status'], ['rm', '/workspace/plain'], ['rm', '-r', '/workspace/v0'], sh('echo "git push"')]) {
        await server.exec(id, ['sh', '-c', 'mkdir -p /workspace/v0 && touch /workspace/plain']);
        const r = await asAgent<{ exitCode: number }>({ command });
        assert.equal(r.status, 200, `${JSON.stringify(command)}: ${JSON.stringify(r.body)}`);
      }
      const before = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${id}`);
      assert.deepEqual(before.body.items, [], 'no request for the similar commands');
      const calls = gated.map((command) => asAgent<{ code: string }>({ command, ...stdinOf(command) }));
      let pending: Approval[] = [];
      const until = Date.now() + 60_000;
      while (pending.length < gated.length && Date.now() < until) {
        await new Promise((r) => setTimeout(r, 200));
        const l = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${id}`);
        pending = l.body.items;
      }
      const filed = new Set(pending.map((a) => JSON.stringify(a.payload.command)));
      assert.deepEqual(
        gated.map((c) => JSON.stringify(c)).filter((c) => !filed.has(c)),
        [],
        'every spelling waits for an approval',
      );
      for (let i = 1; i <= 7; i++)
        assert.equal((await server.exec(id, ['test', '-d', `/workspace/v${i}`])).exitCode, 0, `v${i} is still there`);
      for (const a of pending)
        assert.equal((await as('lead', 'POST', `/v1/approvals/${a.id}/decision`, { decision: 'REJECT', reason: 'no' })).status, 200);
      for (const r of await Promise.all(calls)) assert.equal(r.status, 403, JSON.stringify(r.body));
      for (let i = 1; i <= 7; i++)
        assert.equal((await server.exec(id, ['test', '-d', `/workspace/v${i}`])).exitCode, 0, `v${i} is still there after the rejections`);
      await as('owner', 'DELETE', `/v1/workshops/${id}`);
    } finally {
      rmSync(guarded, { recursive: true, force: true });
    }
  });

  it('an approval for one stdin and env is not used by an exec with another', async () => {
    const guarded = makeRepo({ 'atelier.yaml': 'approvals:\n  commands: ["rm -rf *"]\n' });
    try {
      const w = await as<{ id: string; status: string; statusReason: string }>('owner', 'POST', '/v1/workshops', {
        repo: guarded,
        name: 'inputs',
      });
      assert.equal(w.body.status, 'Running', w.body.statusReason);
      const id = w.body.id;
      const agentToken = (await as<{ token: string }>('owner', 'POST', '/v1/tokens', { workshopId: id, expiresInSeconds: 600 })).body.token;
      const agent = { authorization: `Bearer ${agentToken}` };
      const b64 = (t: string): string => Buffer.from(t).toString('base64');
      const approvedStdin = 'rm -rf /workspace/a1\n';
      const filed = await server.api<Approval>(
        'POST',
        `/v1/workshops/${id}/approvals`,
        {
          category: 'SHELL_COMMAND',
          payload: { command: ['sh'], justification: 'clean a1', stdinSha256: createHash('sha256').update(approvedStdin).digest('hex') },
        },
        agent,
      );
      assert.equal(filed.status, 201, JSON.stringify(filed.body));
      assert.equal((await cliAs('owner', ['approve', filed.body.id, '--reason', 'ok'])).code, 0);
      for (const d of ['a1', 'a2']) assert.equal((await server.exec(id, ['mkdir', `/workspace/${d}`])).exitCode, 0);
      // Another stdin: the approval is not used; a new request waits (rejected here).
      const other = server.api<{ code: string }>(
        'POST',
        `/v1/workshops/${id}/exec`,
        { command: ['sh'], stdin: b64('rm -rf /workspace/a2\n') },
        agent,
      );
      let pending: Approval | undefined;
      const until = Date.now() + 30_000;
      while (!pending && Date.now() < until) {
        const l = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${id}`);
        pending = l.body.items[0];
        if (!pending) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(pending, 'an exec with another stdin filed its own request');
      assert.equal(pending.payload.stdinPreview, 'rm -rf /workspace/a2\n');
      assert.match(String(pending.payload.stdinSha256), /^[0-9a-f]{64}$/);
      assert.equal((await cliAs('owner', ['approvals', 'reject', pending.id, '--reason', 'no'])).code, 0);
      assert.equal((await other).status, 403);
      assert.equal((await server.exec(id, ['test', '-d', '/workspace/a2'])).exitCode, 0);
      // The approved stdin, with an env added: not the approved exec either.
      const withEnv = server.api(
        'POST',
        `/v1/workshops/${id}/exec`,
        { command: ['sh'], stdin: b64(approvedStdin), env: { FOO: '1' } },
        agent,
      );
      let second: Approval | undefined;
      while (!second && Date.now() < until + 30_000) {
        const l = await as<{ items: Approval[] }>('owner', 'GET', `/v1/approvals?status=PENDING&category=SHELL_COMMAND&workshop=${id}`);
        second = l.body.items[0];
        if (!second) await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(second, 'an exec with an env filed its own request');
      assert.deepEqual(Object.keys(second.payload.env as object), ['FOO']);
      assert.equal((await cliAs('owner', ['approvals', 'reject', second.id, '--reason', 'no'])).code, 0);
      assert.equal((await withEnv).status, 403);
      // The approved stdin and no env: runs at once, using the approval.
      const ok = await server.api<{ exitCode: number }>(
        'POST',
        `/v1/workshops/${id}/exec`,
        { command: ['sh'], stdin: b64(approvedStdin) },
        agent,
      );
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal((await server.exec(id, ['test', '-d', '/workspace/a1'])).exitCode, 1);
      await as('owner', 'DELETE', `/v1/workshops/${id}`);
    } finally {
      rmSync(guarded, { recursive: true, force: true });
    }
  });

  it('audit verify reports an intact chain covering every event', async () => {
    const v = await server.cli(['audit', 'verify', '-o', 'json']);
    assert.equal(v.code, 0, v.stderr);
    const body = JSON.parse(v.stdout) as { ok: boolean; rows: number };
    assert.equal(body.ok, true);
    assert.ok(body.rows >= 8, String(body.rows));
    const text = await server.cli(['audit', 'verify']);
    assert.match(text.stdout, /audit intact/);
    assert.equal((await runCli(['audit', 'verify'], { env: { ...server.env(), ATELIER_TOKEN: tokens.lead } })).code, 1);
  });
});
