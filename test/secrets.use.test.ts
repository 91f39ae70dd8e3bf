import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { build } from 'esbuild';
import { slackMessage, type ApprovalRequest } from '../src/approvals/index.js';
import { actors } from './helpers/actors.js';
import { TestServer, makeRepo } from './helpers/server.js';
import { makeOriginCertificates } from './helpers/tls.js';

// SECRET_REQUEST in use mode, end to end: the workshop's agent asks (API and real CLI) to have a
// secret sent to one host; a person approves; the egress proxy then adds it to the real curl's
// and python requests' HTTPS requests from inside a real workshop, until the grant is revoked or
// expires. A local HTTPS origin with a CA of this test's own stands in for the provider's API;
// it says whose credential it got, never the value. The value never enters the workshop.
const VALUE = `zyx_use_${randomBytes(16).toString('hex')}`;
/** What every line searching for the value looks for, without writing it (the pattern is zy[x]_use_). */
const PATTERN = 'zy[x]_use_';
const sha = (s: string): string => createHash('sha256').update(s).digest('hex');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The official MCP SDK client, bundled and run by the workshop's own node: calls one tool, prints its result. */
const MCP_CLIENT = `
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
(async () => {
  const call = JSON.parse(process.argv[2]);
  const client = new Client({ name: 'secret-use-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(process.env.ATELIER_MCP_URL)));
  const result = await client.callTool(call, undefined, { timeout: 120000, resetTimeoutOnProgress: true, onprogress: () => undefined });
  await client.close();
  console.log(JSON.stringify(result));
})().catch((e) => { console.error(String(e && e.message || e)); process.exit(1); });
`;

describe('SECRET_REQUEST in use mode: the proxy adds the secret, the workshop never holds it', () => {
  let dir: string;
  let origin: https.Server;
  let port: number;
  let server: TestServer;
  let ws: string;
  const repos: string[] = [];
  /** Every API and CLI answer, and everything the workshop's clients printed (the proxy's answers included). */
  const answers: string[] = [];
  const { tokens, as, cliAs, workshopWithAgent } = actors(() => server, { record: (text) => answers.push(text) });
  let api: string;
  let other: string;

  const sh = async (cmd: string): Promise<{ exitCode: number; stdout: string; stderr: string }> => {
    const r = await server.exec(ws, ['bash', '-c', cmd]);
    answers.push(r.stdout, r.stderr);
    return r;
  };
  /** Whose credential the origin got for a curl trusting the workshop's stores (the broker's CA included). */
  const whose = async (path: string, extra = ''): Promise<string> => {
    const r = await sh(`curl -sS --fail ${extra} https://${api}${path}`);
    if (r.exitCode !== 0) return `curl failed: ${r.stderr.trim()}`;
    return (JSON.parse(r.stdout) as { whose: string }).whose;
  };
  /** The same through an end-to-end tunnel: curl trusts the origin's own CA only. */
  const tunnelled = (path: string): Promise<string> => whose(path, '--cacert /tmp/origin-ca.pem');
  const ask = (payload: Record<string, unknown>) =>
    as<ApprovalRequest & { code?: string; message?: string; details?: { field?: string } }>(
      'agent',
      'POST',
      `/v1/workshops/${ws}/approvals`,
      {
        category: 'SECRET_REQUEST',
        payload: { name: 'API_TOKEN', justification: 'call the provider in the integration tests', ...payload },
      },
    );
  const applied = async (id: string): Promise<ApprovalRequest> => {
    const until = Date.now() + 20_000;
    for (;;) {
      const a = (await as<ApprovalRequest>('owner', 'GET', `/v1/approvals/${id}`)).body;
      if (a.effect.appliedAt || Date.now() > until) return a;
      await sleep(50);
    }
  };
  const approve = async (id: string): Promise<void> => {
    const ok = await cliAs('owner', ['approvals', 'approve', id, '--reason', 'test token only']);
    assert.equal(ok.code, 0, ok.stderr);
    const a = await applied(id);
    assert.ok(a.effect.appliedAt, 'effect applied');
    assert.equal(a.effect.error, null);
  };

  before(async () => {
    dir = mkdtempSync('/tmp/atelier-secret-use-');
    makeOriginCertificates(dir, ['api.stand-in.test', 'other.stand-in.test'], 'stand-in provider CA');
    origin = https.createServer({ key: readFileSync(join(dir, 'origin.key')), cert: readFileSync(join(dir, 'origin.pem')) }, (req, res) => {
      const a = req.headers['x-api-key'] ?? req.headers.authorization;
      const expected = req.headers['x-api-key'] !== undefined ? VALUE : `Bearer ${VALUE}`;
      // Never echoes the value: says whose it was.
      const who = a === undefined ? 'none' : sha(String(a)) === sha(expected) ? 'broker' : 'other';
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ whose: who }));
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    port = (origin.address() as AddressInfo).port;
    api = `api.stand-in.test:${port}`;
    other = `other.stand-in.test:${port}`;
    writeFileSync(join(dir, 'hosts'), '127.0.0.1 api.stand-in.test other.stand-in.test evil.stand-in.test\n');
    server = await TestServer.start({
      env: {
        ATELIER_EGRESS_HOSTS: join(dir, 'hosts'),
        ATELIER_EGRESS_ALLOW_RANGES: '127.0.0.1/32',
        ATELIER_EGRESS_UPSTREAM_CA: join(dir, 'ca.pem'),
      },
    });
    tokens.admin = server.token;
    assert.equal((await as('admin', 'POST', '/v1/users', { name: 'owner', role: 'member' })).status, 201);
    tokens.owner = (await as<{ token: string }>('admin', 'POST', '/v1/tokens', { user: 'owner', expiresInSeconds: 3600 })).body.token;
    const set = await cliAs('admin', ['secrets', 'set', 'API_TOKEN'], `${VALUE}\n`);
    assert.equal(set.code, 0, set.stderr);
    // The project binds nothing: only approvals do.
    const repo = makeRepo({
      'atelier.yaml': ['egress:', `  allow: ["${api}", "${other}"]`, '  askHoldSeconds: 0', ''].join('\n'),
    });
    repos.push(repo);
    ws = await workshopWithAgent(repo, 'use-mode');
    const put = await sh(`cat > /tmp/origin-ca.pem <<'PEM'\n${readFileSync(join(dir, 'ca.pem'), 'utf8')}PEM`);
    assert.equal(put.exitCode, 0, put.stderr);
  });

  after(async () => {
    await server?.dispose();
    await new Promise<void>((r) => (origin ? origin.close(() => r()) : r()));
    if (dir) rmSync(dir, { recursive: true, force: true });
    for (const r of repos) rmSync(r, { recursive: true, force: true });
  });

  it('a request for a host not allowed, a secret not set or a bad header or value is refused, naming the place', async () => {
    const cases: [Record<string, unknown>, number, string, RegExp][] = [
      [{ host: `evil.stand-in.test:${port}` }, 400, 'payload.host', /not allowed by the workshop's egress policy: ask for it first/],
      [{ name: 'NOT_SET', host: api, value: 'Bearer ${secret:NOT_SET}' }, 404, 'payload.name', /atelier secrets set NOT_SET/],
      [{ host: api, header: 'Host' }, 400, 'payload.header', /Host frames the request/],
      [{ host: api, header: 'Bad Header' }, 400, 'payload.header', /not an HTTP header name/],
      [{ host: api, value: 'Bearer ${secret:OTHER}' }, 400, 'payload.value', /names the secret OTHER, but the request is for API_TOKEN/],
      [{ host: api, value: '${secret:API_TOKEN}${secret:API_TOKEN}' }, 400, 'payload.value', /exactly one secret/],
      [{ host: '*.stand-in.test' }, 400, 'payload.host', /not one host/],
      [{ mode: 'use' }, 400, 'payload.host', /names the host the secret is sent to/],
      [{ mode: 'reveal', host: api }, 400, 'payload.host', /only a request in use mode names a host/],
    ];
    for (const [payload, status, field, message] of cases) {
      const r = await ask(payload);
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.equal(r.body.details?.field, field, JSON.stringify(r.body));
      assert.match(r.body.message ?? '', message);
    }
    // The CLI door says the same, exit 1.
    const cli = await cliAs('agent', [
      'approvals',
      'request',
      '--category',
      'SECRET_REQUEST',
      '--payload',
      JSON.stringify({ name: 'API_TOKEN', host: `evil.stand-in.test:${port}`, justification: 'x' }),
    ]);
    assert.equal(cli.code, 1);
    assert.match(cli.stderr, /payload\.host: evil\.stand-in\.test:\d+ is not allowed/);
    // Nothing was filed.
    const pending = await as<{ items: unknown[] }>('owner', 'GET', `/v1/approvals?workshop=${ws}&status=PENDING`);
    assert.equal(pending.status, 200, JSON.stringify(pending.body));
    assert.deepEqual(pending.body.items, []);
  });

  it('nothing is added before approval; once approved, curl and python get the header, in place of their own', async () => {
    // Not bound: an end-to-end tunnel (the origin's own certificate), no header.
    assert.equal(await tunnelled('/before'), 'none');
    const filed = await cliAs('agent', [
      'approvals',
      'request',
      '--category',
      'SECRET_REQUEST',
      '--payload',
      JSON.stringify({ name: 'API_TOKEN', host: api, ttlSeconds: 3600, justification: 'call the provider' }),
      '-o',
      'json',
    ]);
    assert.equal(filed.code, 0, filed.stderr);
    const a = JSON.parse(filed.stdout) as ApprovalRequest;
    assert.deepEqual(a.payload, {
      name: 'API_TOKEN',
      host: api,
      header: 'Authorization',
      value: 'Bearer ${secret:API_TOKEN}',
      mode: 'use',
      risk: 'lower',
      ttlSeconds: 3600,
      justification: 'call the provider',
    });
    // Pending: still nothing added.
    assert.equal(await tunnelled('/pending'), 'none');
    // What a decider reads: the CLI, Slack.
    const shown = await cliAs('owner', ['approvals', 'show', a.id]);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /what:\s+use secret API_TOKEN at api\.stand-in\.test:\d+ \(never revealed\)/);
    assert.match(
      shown.stdout,
      /mode:\s+use \(lower risk\): the egress proxy sends Authorization: Bearer \$\{secret:API_TOKEN\} to api\.stand-in\.test/,
    );
    assert.match(JSON.stringify(slackMessage(a).blocks), /lower risk: the proxy adds `Authorization`; the value never enters the workshop/);

    await approve(a.id);
    assert.equal(await whose('/after', "-H 'Authorization: Bearer agent-own-value'"), 'broker');
    const py = await sh(`/usr/bin/python3 -c "import requests; print(requests.get('https://${api}/py').json()['whose'])"`);
    assert.equal(py.exitCode, 0, py.stderr);
    assert.equal(py.stdout.trim(), 'broker');
    // Another allowed host is not touched: still a tunnel with the origin's certificate.
    const r = await sh(`curl -sS --fail --cacert /tmp/origin-ca.pem https://${other}/other`);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal((JSON.parse(r.stdout) as { whose: string }).whose, 'none');
    // Neither a file nor a variable: the reveal mode's places stay empty.
    assert.equal((await sh('ls -A /run/atelier/secrets 2>/dev/null; printenv API_TOKEN; true')).stdout, '');
  });

  it('revoking the grant stops the header at once, on a kept-alive connection too', async () => {
    const a = (await ask({ host: api })).body;
    assert.equal(a.payload.mode, 'use');
    await approve(a.id);
    // One python session: a request, then (after the revocation) another on the same connection.
    const script = [
      'import os, sys, time, requests',
      's = requests.Session()',
      `first = s.get('https://${api}/one').json()['whose']`,
      "open('/tmp/first', 'w').write(first)",
      'end = time.time() + 60',
      "while not os.path.exists('/tmp/go') and time.time() < end: time.sleep(0.05)",
      `r = s.get('https://${api}/two')`,
      "print(first, r.status_code, r.headers.get('x-atelier-egress'), r.text)",
    ].join('\n');
    assert.equal((await sh(`rm -f /tmp/first /tmp/go; cat > /tmp/session.py <<'PY'\n${script}\nPY`)).exitCode, 0);
    const running = sh('/usr/bin/python3 /tmp/session.py');
    for (let i = 0; i < 200 && (await sh('cat /tmp/first 2>/dev/null')).stdout === ''; i++) await sleep(100);
    // Both grants of API_TOKEN for this host end (the later one is in force): revoke both.
    const revoked = await cliAs('owner', ['secrets', 'revoke', a.id]);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.match(revoked.stdout, /grant of request .* ended/);
    const earlier = (await as<{ items: ApprovalRequest[] }>('owner', 'GET', `/v1/approvals?workshop=${ws}&status=APPROVED`)).body.items;
    for (const e of earlier) assert.equal((await as('owner', 'DELETE', `/v1/secrets/grants/${e.id}`)).status, 204);
    await sh('touch /tmp/go');
    const out = await running;
    assert.equal(out.exitCode, 0, out.stderr);
    const [first, status, code] = out.stdout.trim().split(' ');
    assert.equal(first, 'broker');
    assert.equal(status, '403', out.stdout);
    assert.equal(code, 'CREDENTIAL_GONE');
    assert.match(out.stdout, /has ended: nothing was sent/);
    // A new connection is an end-to-end tunnel again.
    assert.equal(await tunnelled('/revoked'), 'none');
    // Revoking is the workshop owner's or a maintainer's, never the agent's; an unknown id is 404.
    assert.equal((await as('agent', 'DELETE', `/v1/secrets/grants/${a.id}`)).status, 403);
    const unknown = await cliAs('owner', ['secrets', 'revoke', '00000000-0000-4000-8000-000000000000']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no grant of request/);
  });

  it('a grant that expires stops the header; another header and template are used as asked', async () => {
    const a = (await ask({ host: api, header: 'X-Api-Key', value: '${secret:API_TOKEN}', ttlSeconds: 10 })).body;
    assert.equal(a.payload.header, 'X-Api-Key');
    await approve(a.id);
    assert.equal(await whose('/key'), 'broker');
    const end = Date.now() + 40_000;
    let seen = '';
    while (Date.now() < end && (seen = await tunnelled('/expired')) !== 'none') await sleep(250);
    assert.equal(seen, 'none', 'after its expiry the host is a plain tunnel again');
  });

  it('the MCP tool request_approval asks for use the same way', async () => {
    const bundle = await build({
      stdin: { contents: MCP_CLIENT, resolveDir: process.cwd(), loader: 'js' },
      bundle: true,
      platform: 'node',
      format: 'cjs',
      write: false,
      logLevel: 'silent',
    });
    const put = await server.api('PUT', `/v1/workshops/${ws}/files?path=mcp-client.cjs`, Buffer.from(bundle.outputFiles[0]!.contents));
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const call = {
      name: 'request_approval',
      arguments: {
        category: 'SECRET_REQUEST',
        payload: { name: 'API_TOKEN', host: api, ttlSeconds: 3600, justification: 'asked over MCP' },
      },
    };
    const running = sh(`node mcp-client.cjs '${JSON.stringify(call)}'`);
    let pending: ApprovalRequest | undefined;
    for (let i = 0; i < 200 && !pending; i++) {
      const r = await as<{ items: ApprovalRequest[] }>('owner', 'GET', `/v1/approvals?workshop=${ws}&status=PENDING`);
      pending = r.body.items[0];
      if (!pending) await sleep(100);
    }
    assert.ok(pending, 'the MCP request was filed');
    assert.equal(pending.payload.mode, 'use');
    assert.equal(pending.payload.risk, 'lower');
    assert.equal(pending.payload.host, api);
    await approve(pending.id);
    const out = await running;
    assert.equal(out.exitCode, 0, out.stderr);
    assert.equal((JSON.parse(out.stdout) as { structuredContent: { status: string } }).structuredContent.status, 'APPROVED');
    assert.equal(await whose('/mcp'), 'broker');
    assert.equal((await as('owner', 'DELETE', `/v1/secrets/grants/${pending.id}`)).status, 204);
    assert.equal(await tunnelled('/mcp-revoked'), 'none');
  });

  it('reveal stays, shown as the riskier choice', async () => {
    const r = await ask({});
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.payload.mode, 'reveal');
    assert.equal(r.body.payload.risk, 'higher');
    const shown = await cliAs('owner', ['approvals', 'show', r.body.id]);
    assert.match(shown.stdout, /what:\s+reveal secret API_TOKEN inside the workshop \(riskier\)/);
    assert.match(shown.stdout, /mode:\s+reveal \(RISKIER\): the value enters the workshop/);
    assert.match(JSON.stringify(slackMessage(r.body).blocks), /\*riskier\*: the agent can copy the value anywhere/);
    assert.equal((await cliAs('owner', ['approvals', 'reject', r.body.id, '--reason', 'use mode instead'])).code, 0);
  });

  it('a live use grant is bound again after a server restart', async () => {
    const a = (await ask({ host: api, ttlSeconds: 3600 })).body;
    await approve(a.id);
    assert.equal(await whose('/before-restart'), 'broker');
    await server.stop();
    await server.boot();
    // The workshop ran on meanwhile; its proxy listener and its grants come back with the server.
    const end = Date.now() + 30_000;
    let seen = '';
    while (Date.now() < end && (seen = await whose('/after-restart').catch((e: Error) => e.message)) !== 'broker') await sleep(250);
    assert.equal(seen, 'broker');
    assert.equal((await as('owner', 'DELETE', `/v1/secrets/grants/${a.id}`)).status, 204);
    assert.equal(await tunnelled('/after-restart-revoked'), 'none');
  });

  it('the value is nowhere: the workshop’s files, environment and processes, the answers, the egress log, the server log', async () => {
    const inside = await sh(
      `echo "files:$(grep -rIl '${PATTERN}' /workspace /tmp /home /run /etc 2>/dev/null)"; ` +
        `echo "procs:$(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; done | tr '\\0' '\\n' | grep -c '${PATTERN}')"`,
    );
    assert.match(inside.stdout, /^files:\nprocs:0\n$/, inside.stdout + inside.stderr);
    const log = await as<unknown>('owner', 'GET', `/v1/workshops/${ws}/egress`);
    assert.equal(log.status, 200);
    assert.ok(JSON.stringify(log.body).includes('api.stand-in.test'), 'the egress log recorded the requests');
    assert.ok(answers.length > 30);
    for (const a of answers) assert.ok(!a.includes(VALUE), `an answer holds the value: ${a.slice(0, 200)}`);
    assert.ok(server.log.length > 0 && !server.log.includes(VALUE), 'the server log does not hold the value');
    let found = '';
    try {
      // The workshops' disk images (sparse, 5 GiB each: read whole, minutes) hold the workshops' own
      // files, searched from inside above; everything else, the database's files and WAL included, here.
      found = execFileSync('grep', ['-r', '-l', '-a', '-D', 'skip', '--exclude-dir=disks', '-F', VALUE, server.dataDir], {
        encoding: 'utf8',
      });
    } catch (err) {
      assert.equal((err as { status: number }).status, 1, 'grep found nothing (status 1), not an error');
    }
    assert.equal(found, '', `the value is in clear in ${found}`);
  });
});
