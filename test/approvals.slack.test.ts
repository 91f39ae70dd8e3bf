import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import pg from 'pg';
import { TestServer, makeRepo } from './helpers/server.js';
import { ExternalPostgres } from './helpers/postgres.js';

// Slack cannot run here: a fake Slack (a local HTTP server) records what Slack would receive
// (chat.postMessage, chat.update) and answers users.info. The interactions endpoint is driven
// with requests signed exactly as Slack signs them (v0, HMAC-SHA256 over the raw body).
const SECRET = 'slack-signing-secret-for-tests';

interface Recorded {
  method: string;
  body: Record<string, unknown>;
}

function sign(body: string, ts: number, secret = SECRET): string {
  return `v0=${createHmac('sha256', secret).update(`v0:${ts}:${body}`).digest('hex')}`;
}

function clickBody(id: string, slackUser: string, action: 'approve' | 'reject' = 'approve'): string {
  const payload = { type: 'block_actions', user: { id: slackUser }, actions: [{ action_id: action, value: id }] };
  return new URLSearchParams({ payload: JSON.stringify(payload) }).toString();
}

describe('approvals in Slack (fake Slack)', () => {
  let db: ExternalPostgres;
  let server: TestServer;
  let fakeSlack: Server;
  let repo: string;
  let ws: string;
  let agent: string;
  let sql: pg.Client;
  const recorded: Recorded[] = [];

  const post = (body: string, headers: Record<string, string>) =>
    fetch(`${server.url}/v1/webhooks/slack/interactions`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body,
    });
  const signed = (body: string, ts = Math.floor(Date.now() / 1000)) =>
    post(body, { 'x-slack-request-timestamp': String(ts), 'x-slack-signature': sign(body, ts) });
  const fileRequest = async (host: string): Promise<string> => {
    const r = await server.api<{ id: string }>(
      'POST',
      `/v1/workshops/${ws}/approvals`,
      { category: 'ALLOWLIST_EXPANSION', payload: { host, justification: 'needs the <b>API</b>' } },
      { authorization: `Bearer ${agent}` },
    );
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id;
  };
  const status = async (id: string) => (await server.api<{ status: string; decidedBy: string }>('GET', `/v1/approvals/${id}`)).body;

  before(async () => {
    fakeSlack = createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        const method = (req.url ?? '').replace('/api/', '');
        const body = JSON.parse(text || '{}') as Record<string, unknown>;
        recorded.push({ method, body });
        res.setHeader('content-type', 'application/json');
        if (method === 'users.info') {
          const users: Record<string, object> = {
            UOWNER: { profile: { email: 'Owner@Example.com' }, is_email_confirmed: true },
            UMATE: { profile: { email: 'mate@example.com' }, is_email_confirmed: true },
            UUNCONFIRMED: { profile: { email: 'owner@example.com' }, is_email_confirmed: false },
          };
          const u = users[String(body.user)];
          res.end(JSON.stringify(u ? { ok: true, user: { id: body.user, ...u } } : { ok: false, error: 'user_not_found' }));
        } else if (method === 'chat.postMessage')
          res.end(JSON.stringify({ ok: true, channel: 'C123', ts: `1700000000.${recorded.length}` }));
        else res.end(JSON.stringify({ ok: true }));
      });
    });
    await new Promise<void>((r) => fakeSlack.listen(0, '127.0.0.1', r));
    const port = (fakeSlack.address() as { port: number }).port;
    db = ExternalPostgres.start();
    server = await TestServer.start({
      databaseUrl: db.url,
      env: {
        ATELIER_SLACK_BOT_TOKEN: 'xoxb-test',
        ATELIER_SLACK_CHANNEL: 'C123',
        ATELIER_SLACK_SIGNING_SECRET: SECRET,
        ATELIER_SLACK_API_URL: `http://127.0.0.1:${port}/api`,
      },
    });
    // Local accounts get the address their Slack account shows as an admin would: at creation, or later.
    const added = await server.cli(['users', 'add', 'owner', '--email', 'owner@example.com']);
    assert.equal(added.code, 0, added.stderr);
    assert.equal((await server.api('POST', '/v1/users', { name: 'mate', role: 'member' })).status, 201);
    const edited = await server.cli(['users', 'edit', 'mate', '--email', 'mate@example.com']);
    assert.equal(edited.code, 0, edited.stderr);
    assert.match(edited.stdout, /email:\s+mate@example\.com/);
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const ownerToken = (await server.api<{ token: string }>('POST', '/v1/tokens', { user: 'owner', expiresInSeconds: 600 })).body.token;
    repo = makeRepo();
    const w = await server.api<{ id: string }>('POST', '/v1/workshops', { repo, name: 'slack' }, { authorization: `Bearer ${ownerToken}` });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    ws = w.body.id;
    agent = (await server.api<{ token: string }>('POST', '/v1/tokens', { workshopId: ws, expiresInSeconds: 600 })).body.token;
  });

  after(async () => {
    await sql?.end();
    await server?.dispose();
    db?.stop();
    fakeSlack?.close();
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('posts a Block Kit message with buttons, and a signed click by the owner approves and updates it', async () => {
    const id = await fileRequest('slack.example');
    const until = Date.now() + 10_000;
    let posted: Recorded | undefined;
    while (!posted && Date.now() < until) {
      posted = recorded.find((r) => r.method === 'chat.postMessage' && JSON.stringify(r.body).includes(id));
      if (!posted) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(posted, 'the fake Slack received chat.postMessage');
    assert.equal(posted.body.channel, 'C123');
    const blocks = JSON.stringify(posted.body.blocks);
    assert.match(blocks, /"action_id":"approve"/);
    assert.match(blocks, /"action_id":"reject"/);
    assert.match(blocks, /needs the &lt;b&gt;API&lt;\/b&gt;/);
    assert.match(blocks, /slack\.example/);

    const res = await signed(clickBody(id, 'UOWNER'));
    assert.equal(res.status, 200, await res.clone().text());
    assert.match(((await res.json()) as { text: string }).text, /APPROVED by owner/);
    assert.equal((await status(id)).status, 'APPROVED');
    const audit = await sql.query<{ channel: string; subject: string }>(
      "SELECT channel, subject FROM hitl_audit WHERE request_id = $1 AND event = 'APPROVED'",
      [id],
    );
    assert.deepEqual(audit.rows, [{ channel: 'slack', subject: 'user/owner' }]);
    let updated: Recorded | undefined;
    while (!updated && Date.now() < until) {
      updated = recorded.find((r) => r.method === 'chat.update' && JSON.stringify(r.body).includes(id));
      if (!updated) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(updated, 'the message was updated');
    assert.match(String(updated.body.ts), /^1700000000\.\d+$/);
    assert.equal(updated.body.channel, 'C123');
    assert.doesNotMatch(JSON.stringify(updated.body.blocks), /"action_id":"approve"/);
    assert.match(JSON.stringify(updated.body.blocks), /APPROVED\*? by owner/);
  });

  it('refuses unsigned, badly signed, stale, future, tampered and replayed requests with 401, changing nothing', async () => {
    const id = await fileRequest('vectors.example');
    const body = clickBody(id, 'UOWNER');
    const now = Math.floor(Date.now() / 1000);
    const vectors: [string, Promise<Response>][] = [
      ['missing headers', post(body, {})],
      ['missing signature', post(body, { 'x-slack-request-timestamp': String(now) })],
      ['301 s old', post(body, { 'x-slack-request-timestamp': String(now - 301), 'x-slack-signature': sign(body, now - 301) })],
      // Ahead by a margin: on a busy machine the request may reach the server seconds after `now`, closer to the window.
      ['310 s ahead', post(body, { 'x-slack-request-timestamp': String(now + 310), 'x-slack-signature': sign(body, now + 310) })],
      [
        'tampered body',
        post(body.replace('approve', 'reject'), { 'x-slack-request-timestamp': String(now), 'x-slack-signature': sign(body, now) }),
      ],
      [
        'wrong prefix',
        post(body, { 'x-slack-request-timestamp': String(now), 'x-slack-signature': sign(body, now).replace('v0=', 'v1=') }),
      ],
      ['another secret', post(body, { 'x-slack-request-timestamp': String(now), 'x-slack-signature': sign(body, now, 'other-secret') })],
      ['timestamp not a number', post(body, { 'x-slack-request-timestamp': 'soon', 'x-slack-signature': sign(body, now) })],
    ];
    for (const [name, p] of vectors) {
      const r = await p;
      assert.equal(r.status, 401, name);
      assert.equal(((await r.json()) as { code: string }).code, 'UNAUTHENTICATED', name);
    }
    assert.equal((await status(id)).status, 'PENDING');
    // Within the window, 300 s either way is accepted; the same signed request twice is a replay.
    const ts = now - 290;
    const headers = { 'x-slack-request-timestamp': String(ts), 'x-slack-signature': sign(body, ts) };
    assert.equal((await post(body, headers)).status, 200);
    const replay = await post(body, headers);
    assert.equal(replay.status, 401);
    assert.match(((await replay.json()) as { message: string }).message, /replay/);
  });

  it('applies the same rights: a Slack user without an Atelier account or without the right changes nothing', async () => {
    const id = await fileRequest('rights.example');
    for (const [user, code] of [
      ['UMATE', 403],
      ['UUNCONFIRMED', 403],
      ['UNOBODY', 403],
    ] as const) {
      const r = await signed(clickBody(id, user));
      assert.equal(r.status, code, user);
    }
    assert.equal((await status(id)).status, 'PENDING');
    for (const bad of [
      'payload=not-json',
      'nothing=here',
      new URLSearchParams({ payload: JSON.stringify({ type: 'view_submission' }) }).toString(),
    ]) {
      const r = await signed(bad);
      assert.equal(r.status, 400, bad);
    }
    const late = await signed(clickBody(id, 'UOWNER', 'reject'));
    assert.equal(late.status, 200);
    assert.equal((await status(id)).status, 'REJECTED');
    // A second click (another message, another user) gets the conflict, not a second decision.
    const again = await signed(clickBody(id, 'UOWNER'));
    assert.equal(again.status, 409);
  });
});
