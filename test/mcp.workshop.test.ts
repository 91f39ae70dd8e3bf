import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { presetCommand } from '../src/terminals/index.js';
import { TestServer, makeRepo } from './helpers/server.js';

// The MCP endpoint inside every workshop (http://mcp.atelier.internal/mcp), driven by the official
// SDK client (Client over StreamableHTTPClientTransport) bundled into the workspace and run by the
// workshop's own node, as an agent's MCP client would be: no token configured (the endpoint knows
// the workshop by the socket the connection came through), tools called, approvals decided by a
// person with the real CLI, another workshop's token refused.

const CLIENT_SCRIPT = `
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
(async () => {
  const req = JSON.parse(process.argv[2]);
  const out = { progress: [] };
  const url = new URL(req.url || process.env.ATELIER_MCP_URL);
  const transport = new StreamableHTTPClientTransport(url, req.headers ? { requestInit: { headers: req.headers } } : undefined);
  const client = new Client({ name: 'workshop-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    if (req.list) out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
    if (req.call) {
      const ac = new AbortController();
      if (req.abortAfterMs) setTimeout(() => ac.abort(), req.abortAfterMs);
      try {
        out.result = await client.callTool({ name: req.call.name, arguments: req.call.args || {} }, undefined, {
          signal: ac.signal,
          timeout: 120000,
          resetTimeoutOnProgress: true,
          onprogress: (p) => out.progress.push(p),
        });
      } catch (e) {
        out.callError = String(e && e.message || e);
      }
    }
    if (req.callAfter) out.after = await client.callTool({ name: req.callAfter, arguments: {} });
  } catch (e) {
    out.error = String(e && e.message || e);
  }
  await client.close().catch(() => undefined);
  console.log(JSON.stringify(out));
})();
`;

interface ClientOut {
  tools?: string[];
  result?: { isError?: boolean; structuredContent?: Record<string, unknown>; content?: { text: string }[] };
  after?: { isError?: boolean; structuredContent?: Record<string, unknown> };
  progress: { progress: number; message?: string }[];
  callError?: string;
  error?: string;
}

describe('the MCP endpoint inside a workshop', () => {
  let server: TestServer;
  let ws: string;
  let other: string;
  let script: Buffer;

  const inside = async (id: string, req: Record<string, unknown>): Promise<ClientOut> => {
    const r = await server.exec(id, ['node', 'mcp-client.cjs', JSON.stringify(req)]);
    assert.equal(r.exitCode, 0, r.stderr);
    return JSON.parse(r.stdout) as ClientOut;
  };

  const pendingOf = async (id: string): Promise<{ id: string; payload: Record<string, unknown> }> => {
    for (let i = 0; i < 200; i++) {
      const r = await server.api<{ items: { id: string; payload: Record<string, unknown> }[] }>(
        'GET',
        `/v1/approvals?workshop=${id}&status=PENDING`,
      );
      if (r.body.items.length > 0) return r.body.items[0]!;
      await new Promise((res) => setTimeout(res, 100));
    }
    throw new Error('no pending approval appeared');
  };

  before(async () => {
    server = await TestServer.start();
    const bundle = await build({
      stdin: { contents: CLIENT_SCRIPT, resolveDir: process.cwd(), loader: 'js' },
      bundle: true,
      platform: 'node',
      format: 'cjs',
      write: false,
      logLevel: 'silent',
    });
    script = Buffer.from(bundle.outputFiles[0]!.contents);
    for (const name of ['mcp-one', 'mcp-two']) {
      const w = await server.createWorkshop({ repo: makeRepo(), name });
      assert.equal(w.status, 'Running', w.statusReason ?? '');
      const put = await server.api('PUT', `/v1/workshops/${w.id}/files?path=mcp-client.cjs`, script);
      assert.equal(put.status, 200, JSON.stringify(put.body));
      if (name === 'mcp-one') ws = w.id;
      else other = w.id;
    }
  });

  after(async () => {
    await server?.dispose();
  });

  it('ATELIER_MCP_URL is set; whoami with no token configured is the workshop itself', async () => {
    const env = await server.exec(ws, ['sh', '-c', 'echo "$ATELIER_MCP_URL"']);
    assert.equal(env.stdout.trim(), 'http://mcp.atelier.internal/mcp');
    const out = await inside(ws, { list: true, call: { name: 'whoami' } });
    assert.equal(out.error, undefined);
    assert.deepEqual(out.tools, ['list_simulators', 'request_approval', 'request_simulator', 'whoami']);
    assert.equal(out.result?.isError, undefined, JSON.stringify(out.result));
    assert.equal(out.result?.structuredContent?.workshop_id, ws);
    assert.equal(out.result?.structuredContent?.workshop_name, 'mcp-one');
    assert.equal(out.result?.structuredContent?.user, 'admin');
    // The same from the other workshop is that workshop.
    const two = await inside(other, { call: { name: 'whoami' } });
    assert.equal(two.result?.structuredContent?.workshop_id, other);
  });

  it('request_simulator starts redis hot and the workshop queries it at once', async () => {
    const out = await inside(ws, { call: { name: 'request_simulator', args: { type: 'redis' } } });
    assert.equal(out.result?.isError, undefined, JSON.stringify(out.result));
    const s = out.result?.structuredContent as { name: string; status: string; host: string; port: number; env: Record<string, string> };
    assert.equal(s.status, 'Running');
    assert.equal(s.host, 'redis.atelier.internal');
    assert.equal(s.port, 6379);
    assert.match(s.env.REDIS_URL ?? '', /^redis:\/\/redis\.atelier\.internal:6379/);
    const q = await server.exec(ws, [
      'sh',
      '-c',
      'redis-cli -h redis.atelier.internal -p 6379 SET k mcp && redis-cli -u "$REDIS_URL" GET k',
    ]);
    assert.equal(q.exitCode, 0, q.stderr);
    assert.deepEqual(q.stdout.trim().split('\n'), ['OK', 'mcp']);
    const list = await inside(ws, { call: { name: 'list_simulators' } });
    const items = (list.result?.structuredContent as { simulators: { name: string; status: string }[] }).simulators;
    assert.deepEqual(
      items.map((i) => [i.name, i.status]),
      [['redis', 'Running']],
    );
    // A type that does not exist is a tool error that says so, not an empty answer.
    const bad = await inside(ws, { call: { name: 'request_simulator', args: { type: 'mongodb' } } });
    assert.equal(bad.result?.isError, true);
    assert.match(bad.result?.content?.[0]?.text ?? '', /mongodb/);
  });

  it('request_approval waits, with progress, until a person approves with the CLI', async () => {
    const call = inside(ws, {
      call: {
        name: 'request_approval',
        args: { category: 'ALLOWLIST_EXPANSION', payload: { host: 'registry.example.org', justification: 'fetch the fixtures' } },
      },
    });
    const pending = await pendingOf(ws);
    assert.equal(pending.payload.host, 'registry.example.org');
    const approve = await server.cli(['approve', pending.id, '--reason', 'fixtures are fine']);
    assert.equal(approve.code, 0, approve.stderr);
    const out = await call;
    assert.equal(out.callError, undefined);
    assert.equal(out.result?.isError, undefined, JSON.stringify(out.result));
    assert.equal(out.result?.structuredContent?.status, 'APPROVED');
    assert.equal(out.result?.structuredContent?.reason, 'fixtures are fine');
    assert.equal(out.result?.structuredContent?.approval_id, pending.id);
    assert.ok(out.progress.length >= 1, 'at least one progress notification');
    assert.match(out.progress[0]!.message ?? '', new RegExp(`waiting for a person to decide on approval ${pending.id}`));
  });

  it('a rejection comes back with its reason; a request nobody decides comes back EXPIRED', async () => {
    const call = inside(ws, {
      call: {
        name: 'request_approval',
        args: { category: 'ALLOWLIST_EXPANSION', payload: { host: 'tracker.example.net', justification: 'send usage statistics' } },
      },
    });
    const pending = await pendingOf(ws);
    const reject = await server.cli(['approvals', 'reject', pending.id, '--reason', 'not that']);
    assert.equal(reject.code, 0, reject.stderr);
    const out = await call;
    assert.equal(out.result?.structuredContent?.status, 'REJECTED');
    assert.equal(out.result?.structuredContent?.reason, 'not that');
    assert.match(out.result?.content?.[0]?.text ?? '', /^REJECTED by admin: not that/);

    const expired = await inside(ws, {
      call: {
        name: 'request_approval',
        args: { category: 'ALLOWLIST_EXPANSION', payload: { host: 'late.example.org', justification: 'x' }, ttl_seconds: 1 },
      },
    });
    assert.equal(expired.result?.isError, undefined, JSON.stringify(expired.result));
    assert.equal(expired.result?.structuredContent?.status, 'EXPIRED');
    assert.match(expired.result?.content?.[0]?.text ?? '', /^EXPIRED: nobody decided/);
  });

  it('a client that goes away mid-call loses nothing: the request stays filed and can be decided', async () => {
    const out = await inside(ws, {
      call: {
        name: 'request_approval',
        args: { category: 'ALLOWLIST_EXPANSION', payload: { host: 'gone.example.org', justification: 'x' } },
      },
      abortAfterMs: 700,
    });
    assert.match(out.callError ?? '', /abort/i);
    const pending = await pendingOf(ws);
    assert.equal(pending.payload.host, 'gone.example.org');
    const approve = await server.cli(['approve', pending.id, '--reason', 'later']);
    assert.equal(approve.code, 0, approve.stderr);
    // The server is fine and the endpoint still answers.
    const again = await inside(ws, { call: { name: 'whoami' } });
    assert.equal(again.result?.structuredContent?.workshop_id, ws);
    assert.equal((await server.api('GET', '/healthz')).status, 200);
  });

  it("another workshop's token is refused, and so is a person's token; only /mcp is served there", async () => {
    const token = (await server.exec(other, ['sh', '-c', 'printf %s "$ATELIER_TOKEN"'])).stdout;
    assert.match(token, /^atl_/);
    const foreign = await inside(ws, { call: { name: 'whoami' }, headers: { authorization: `Bearer ${token}` } });
    assert.match(foreign.error ?? '', /403|PERMISSION_DENIED|another workshop/);
    assert.equal(foreign.result, undefined);
    const person = await inside(ws, { call: { name: 'whoami' }, headers: { authorization: `Bearer ${server.token}` } });
    assert.match(person.error ?? '', /403|PERMISSION_DENIED/);
    // Its own token, given explicitly, is accepted.
    const own = (await server.exec(ws, ['sh', '-c', 'printf %s "$ATELIER_TOKEN"'])).stdout;
    const explicit = await inside(ws, { call: { name: 'whoami' }, headers: { authorization: `Bearer ${own}` } });
    assert.equal(explicit.result?.structuredContent?.workshop_id, ws);
    // The rest of the API is not reachable through this name (it is at api.atelier.internal, with a token).
    const api = await server.exec(ws, ['sh', '-c', 'curl -s -o /dev/null -w "%{http_code}" http://mcp.atelier.internal/v1/workshops']);
    assert.equal(api.stdout, '404');
    // From outside (the server's own port), an agent token acts as its workshop; no token: 401.
    const anon = await fetch(`${server.url}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(anon.status, 401);
  });

  it('is reached through the egress proxy too (a client that ignores NO_PROXY)', async () => {
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } },
    });
    const r = await server.exec(ws, [
      'sh',
      '-c',
      `curl -s --noproxy '' --proxy http://127.0.0.1:3128 -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '${body}' http://mcp.atelier.internal/mcp`,
    ]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /"serverInfo":\{"name":"atelier-workshop"/);
  });

  it('the claude and gemini presets point their CLI at the endpoint without touching the repository', async () => {
    // Stand-ins for the two CLIs (the real ones need an account): each reads its MCP configuration
    // the way the real CLI does (claude: --mcp-config JSON; gemini: GEMINI_CLI_SYSTEM_SETTINGS_PATH)
    // and calls whoami through the SDK client with exactly that configuration.
    const fake = (name: string, urlFrom: string): string =>
      `#!/bin/sh\n# fake ${name}: prints the MCP URL its configuration names, then calls whoami there\nurl=$(${urlFrom})\nexec node /workspace/mcp-client.cjs "{\\"url\\":\\"$url\\",\\"call\\":{\\"name\\":\\"whoami\\"}}"\n`;
    const claude = fake(
      'claude',
      `node -e 'const a=process.argv.slice(1);const c=JSON.parse(a[a.indexOf("--mcp-config")+1]);console.log(c.mcpServers.atelier.type==="http"?c.mcpServers.atelier.url:"")' -- "$@"`,
    );
    const gemini = fake(
      'gemini',
      `node -e 'console.log(JSON.parse(require("fs").readFileSync(process.env.GEMINI_CLI_SYSTEM_SETTINGS_PATH,"utf8")).mcpServers.atelier.httpUrl)'`,
    );
    for (const [name, text] of [
      ['claude', claude],
      ['gemini', gemini],
    ] as const) {
      const put = await server.api('PUT', `/v1/workshops/${ws}/files?path=.fakebin/${name}`, Buffer.from(text));
      assert.equal(put.status, 200);
    }
    const before = await server.exec(ws, ['git', 'status', '--porcelain', '--', '.', ':!.fakebin', ':!mcp-client.cjs']);
    for (const preset of ['claude', 'gemini']) {
      const cmd = presetCommand(preset, ['a prompt']);
      const r = await server.exec(ws, ['sh', '-c', 'chmod +x .fakebin/* && PATH="$PWD/.fakebin:$PATH" exec "$@"', 'sh', ...cmd]);
      assert.equal(r.exitCode, 0, r.stderr);
      const out = JSON.parse(r.stdout) as ClientOut;
      assert.equal(out.result?.structuredContent?.workshop_id, ws, `${preset}: ${r.stdout}`);
    }
    const afterRun = await server.exec(ws, ['git', 'status', '--porcelain', '--', '.', ':!.fakebin', ':!mcp-client.cjs']);
    assert.equal(afterRun.stdout, before.stdout, 'the presets wrote nothing into the repository');
  });
  it("a deleted workshop's endpoint socket goes with it, at once", async () => {
    const w = await server.createWorkshop({ repo: makeRepo(), name: 'mcp-gone' });
    const sock = join(server.dataDir, 'mcp', `${w.id}.sock`);
    assert.ok(existsSync(sock), `the endpoint's socket exists while the workshop does: ${sock}`);
    const del = await server.api('DELETE', `/v1/workshops/${w.id}`);
    assert.equal(del.status, 200, JSON.stringify(del.body));
    assert.equal(existsSync(sock), false, 'gone when the delete answered, not at the next sweep');
  });
});
