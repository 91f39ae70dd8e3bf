import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { BIN, TestServer, makeRepo, runCli } from './helpers/server.js';

interface HttpMcp {
  proc: ChildProcess;
  url: string;
  stderr: () => string;
  stop(): Promise<void>;
}

/** A real `atelier mcp serve --http` process; resolves once it says where it listens. */
async function serveHttp(server: TestServer, args: string[], env: NodeJS.ProcessEnv = {}): Promise<HttpMcp> {
  const proc = spawn(process.execPath, [BIN, 'mcp', 'serve', '--http', '127.0.0.1:0', ...args], {
    env: { ...server.env(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  let stdout = '';
  proc.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    proc.stderr!.on('data', (c: Buffer) => {
      stderr += c.toString();
      const m = /on (http:\/\/\S+\/mcp) /.exec(stderr);
      if (m && /clients send Authorization/.test(stderr)) resolve(m[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`mcp serve --http exited ${code}:\n${stderr}${stdout}`)));
  });
  return {
    proc,
    url,
    stderr: () => stderr,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    },
  };
}

async function connect(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'atelier-http-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
  return client;
}

/** One raw HTTP request (to set a Host header fetch would refuse to send). */
function raw(
  url: string,
  opts: { method: string; headers: Record<string, string>; body?: string },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method, headers: opts.headers }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

const INIT = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
});
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

describe('atelier mcp serve --http (Streamable HTTP, SDK client)', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;
  let other: string;
  let mcp: HttpMcp;
  let token: string;
  const clients: Client[] = [];

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo({ 'README.md': '# hello\n' });
    ws = (await server.createWorkshop({ repo, name: 'http-main' })).id;
    other = (await server.createWorkshop({ repo, name: 'http-other' })).id;
    mcp = await serveHttp(server, []);
    token = readFileSync(join(server.configDir, 'mcp-http.token'), 'utf8').trim();
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await mcp?.stop();
    await server?.dispose();
    rmSync(repo, { recursive: true, force: true });
  });

  it('listens on loopback, writes its token 0600 and says where, never on stdout', () => {
    assert.match(mcp.url, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    assert.equal(statSync(join(server.configDir, 'mcp-http.token')).mode & 0o777, 0o600);
    assert.match(mcp.stderr(), /clients send Authorization: Bearer TOKEN, the token in .*mcp-http\.token/);
    assert.ok(!mcp.stderr().includes(token), 'the token itself is never printed');
  });

  it('serves the same tools as stdio, and they act on the server (exec in a workshop)', async () => {
    const client = await connect(mcp.url, token);
    clients.push(client);
    const names = (await client.listTools()).tools.map((t) => t.name).sort();
    assert.ok(names.includes('atelier_exec_in_sandbox') && names.includes('atelier_create_sandbox'), names.join(','));
    const r = (await client.callTool({
      name: 'atelier_exec_in_sandbox',
      arguments: { workshop_id: ws, command: 'echo over-http' },
    })) as CallToolResult & {
      structuredContent?: { stdout?: string };
    };
    assert.notEqual(r.isError, true, JSON.stringify(r.content));
    assert.equal(r.structuredContent?.stdout, 'over-http\n');
  });

  it('refuses a request without the token or with another, and a Host that is not this server', async () => {
    const none = await raw(mcp.url, { method: 'POST', headers: MCP_HEADERS, body: INIT });
    assert.equal(none.status, 401);
    const wrong = await raw(mcp.url, { method: 'POST', headers: { ...MCP_HEADERS, authorization: 'Bearer atl_mcp_wrong' }, body: INIT });
    assert.equal(wrong.status, 401);
    const rebound = await raw(mcp.url, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${token}`, host: `evil.example:${new URL(mcp.url).port}` },
      body: INIT,
    });
    assert.equal(rebound.status, 403);
    const stale = await raw(mcp.url, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${token}`, 'mcp-session-id': 'nope' },
      body: INIT,
    });
    assert.equal(stale.status, 404);
    const notJson = await raw(mcp.url, { method: 'POST', headers: { ...MCP_HEADERS, authorization: `Bearer ${token}` }, body: '{' });
    assert.equal(notJson.status, 400);
  });

  it('opens the SSE stream on GET for a session, and DELETE ends the session', async () => {
    const init = await fetch(mcp.url, { method: 'POST', headers: { ...MCP_HEADERS, authorization: `Bearer ${token}` }, body: INIT });
    assert.equal(init.status, 200);
    const sid = init.headers.get('mcp-session-id');
    assert.ok(sid, 'a session id');
    await init.body?.cancel();
    const stream = new AbortController();
    const sse = await fetch(mcp.url, {
      headers: {
        accept: 'text/event-stream',
        authorization: `Bearer ${token}`,
        'mcp-session-id': sid,
        'mcp-protocol-version': '2025-03-26',
      },
      signal: stream.signal,
    });
    assert.equal(sse.status, 200);
    assert.match(sse.headers.get('content-type') ?? '', /text\/event-stream/);
    stream.abort();
    const del = await fetch(mcp.url, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${token}`, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-03-26' },
    });
    assert.equal(del.status, 200);
    const gone = await fetch(mcp.url, {
      headers: { accept: 'text/event-stream', authorization: `Bearer ${token}`, 'mcp-session-id': sid },
    });
    assert.equal(gone.status, 404);
  });

  it('--workshop scopes every tool, and ATELIER_MCP_TOKEN is the token when set', async () => {
    const fixed = 'atl_mcp_fixed-token-for-this-test';
    const scoped = await serveHttp(server, ['--workshop', ws], { ATELIER_MCP_TOKEN: fixed });
    try {
      assert.match(scoped.stderr(), /clients send Authorization: Bearer \$ATELIER_MCP_TOKEN/);
      const client = await connect(scoped.url, fixed);
      clients.push(client);
      const list = (await client.callTool({ name: 'atelier_list_sandboxes', arguments: {} })) as CallToolResult & {
        structuredContent?: { sandboxes: { id: string }[] };
      };
      assert.deepEqual(
        list.structuredContent?.sandboxes.map((s) => s.id),
        [ws],
      );
      const r = (await client.callTool({
        name: 'atelier_exec_in_sandbox',
        arguments: { workshop_id: other, command: 'true' },
      })) as CallToolResult;
      assert.equal(r.isError, true);
      assert.match(JSON.stringify(r.content), /^\[\{"type":"text","text":"PERMISSION_DENIED: /);
    } finally {
      await scoped.stop();
    }
  });

  it('a malformed --http is refused with what to give', async () => {
    const r = await runCli(['mcp', 'serve', '--http', 'nope:'], { env: server.env() });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--http "nope:": give \[HOST:\]PORT/);
  });
});
