import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { BIN, TestServer, makeRepo } from './helpers/server.js';

interface Mcp {
  client: Client;
  stderr: () => string;
  /** Anything on stdout that was not a JSON-RPC message, and other transport errors. */
  transportErrors: Error[];
  close(): Promise<void>;
}

/** A real `atelier mcp serve` process, driven by the MCP SDK's own client over stdio. */
async function serve(server: TestServer, args: string[] = []): Promise<Mcp> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [BIN, 'mcp', 'serve', ...args],
    env: server.env() as Record<string, string>,
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (c: Buffer) => (stderr += c.toString()));
  const transportErrors: Error[] = [];
  const client = new Client({ name: 'atelier-test', version: '1.0.0' });
  client.onerror = (err) => transportErrors.push(err);
  await client.connect(transport);
  return { client, stderr: () => stderr, transportErrors, close: () => client.close() };
}

type Result = CallToolResult & { structuredContent?: Record<string, unknown> };

async function tool(m: Mcp, name: string, args: Record<string, unknown> = {}): Promise<Result> {
  return (await m.client.callTool({ name, arguments: args })) as Result;
}

const textOf = (r: Result): string => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

/** A tool error whose text starts with the Atelier error code. */
function assertToolError(r: Result, code: string, message?: RegExp): void {
  assert.equal(r.isError, true, `expected ${code}, got success: ${textOf(r)}`);
  assert.match(textOf(r), new RegExp(`^${code}: `), textOf(r));
  if (message) assert.match(textOf(r), message);
}

const ALL_TOOLS = [
  'atelier_create_sandbox',
  'atelier_exec_in_sandbox',
  'atelier_exec_status',
  'atelier_git_diff',
  'atelier_list_sandboxes',
  'atelier_read_file',
  'atelier_resume',
  'atelier_suspend',
  'atelier_write_file',
];

describe('atelier mcp serve (stdio, SDK client)', () => {
  let server: TestServer;
  let repo: string;
  let ws: string;
  let other: string;
  let mcp: Mcp;

  before(async () => {
    server = await TestServer.start();
    repo = makeRepo({ 'README.md': '# hello\n', 'src/app.txt': 'one\n' });
    ws = (await server.createWorkshop({ repo, name: 'mcp-main' })).id;
    other = (await server.createWorkshop({ repo, name: 'mcp-other' })).id;
    mcp = await serve(server);
  });
  after(async () => {
    await mcp?.close();
    await server?.dispose();
    rmSync(repo, { recursive: true, force: true });
  });

  it('lists every tool with a description and input and output schemas', async () => {
    const { tools } = await mcp.client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ALL_TOOLS);
    for (const t of tools) {
      assert.ok((t.description ?? '').length > 40, `${t.name} has a real description`);
      assert.equal(t.inputSchema.type, 'object');
      assert.equal(t.outputSchema?.type, 'object', `${t.name} has an output schema`);
    }
    const exec = tools.find((t) => t.name === 'atelier_exec_in_sandbox')!;
    assert.deepEqual([...(exec.inputSchema.required ?? [])].sort(), ['command', 'workshop_id']);
    const create = tools.find((t) => t.name === 'atelier_create_sandbox')!;
    assert.deepEqual(Object.keys(create.inputSchema.properties ?? {}).sort(), ['devcontainer_path', 'disk', 'max_budget_usd', 'repo_url']);
    assert.deepEqual(create.inputSchema.required, ['repo_url']);
  });

  it('lists the sandboxes', async () => {
    const r = await tool(mcp, 'atelier_list_sandboxes');
    assert.equal(r.isError, undefined);
    const ids = (r.structuredContent!.sandboxes as { id: string; status: string }[]).map((s) => s.id).sort();
    assert.deepEqual(ids, [ws, other].sort());
    assert.match(textOf(r), new RegExp(`${ws} \\(mcp-main\\) Running`));
  });

  it('runs a command and returns its exit code and output', async () => {
    const r = await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: ws, command: 'cat README.md; echo oops >&2; exit 4' });
    assert.equal(r.isError, undefined, textOf(r));
    const s = r.structuredContent!;
    assert.equal(s.status, 'Exited');
    assert.equal(s.exit_code, 4);
    assert.equal(s.stdout, '# hello\n');
    assert.equal(s.stderr, 'oops\n');
    assert.match(textOf(r), /exited with code 4/);
  });

  it('a command that outlives the call returns a handle and the output so far; atelier_exec_status reads the rest', async () => {
    const r = await tool(mcp, 'atelier_exec_in_sandbox', {
      workshop_id: ws,
      command: 'echo started; sleep 2; echo finished',
      wait_seconds: 0.5,
    });
    const s = r.structuredContent!;
    assert.equal(s.status, 'Running', textOf(r));
    assert.equal(s.exit_code, null);
    assert.equal(s.stdout, 'started\n');
    assert.match(textOf(r), /atelier_exec_status/);
    const st = await tool(mcp, 'atelier_exec_status', { exec_id: s.exec_id, after_offset: s.next_offset, wait_seconds: 30 });
    assert.equal(st.isError, undefined, textOf(st));
    assert.equal(st.structuredContent!.status, 'Exited');
    assert.equal(st.structuredContent!.exit_code, 0);
    assert.equal(st.structuredContent!.stdout, 'finished\n');
    const all = await tool(mcp, 'atelier_exec_status', { exec_id: s.exec_id });
    assert.equal(all.structuredContent!.stdout, 'started\nfinished\n');
    assertToolError(await tool(mcp, 'atelier_exec_status', { exec_id: 'ex-unknown' }), 'NOT_FOUND');
  });

  it('writes and reads files and shows the diff', async () => {
    const w = await tool(mcp, 'atelier_write_file', { workshop_id: ws, path: 'src/app.txt', content: 'two\n' });
    assert.equal(w.isError, undefined, textOf(w));
    assert.deepEqual(w.structuredContent, { path: '/workspace/src/app.txt', bytes: 4 });
    await tool(mcp, 'atelier_write_file', { workshop_id: ws, path: 'new/notes.md', content: 'é\n' });
    const r = await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: 'new/notes.md' });
    assert.deepEqual(r.structuredContent, { path: 'new/notes.md', bytes: 3, content: 'é\n' });
    const d = await tool(mcp, 'atelier_git_diff', { workshop_id: ws });
    assert.equal(d.isError, undefined, textOf(d));
    assert.match(d.structuredContent!.diff as string, /-one\n\+two/);
    assert.deepEqual(d.structuredContent!.untracked, ['new/notes.md']);
  });

  it('refuses paths outside the workspace, symlink escapes, binary and huge files, with a tool error', async () => {
    assertToolError(await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: '../../etc/passwd' }), 'PERMISSION_DENIED');
    assertToolError(await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: '/etc/passwd' }), 'PERMISSION_DENIED');
    assertToolError(await tool(mcp, 'atelier_write_file', { workshop_id: ws, path: '../escape', content: 'x' }), 'PERMISSION_DENIED');
    const prep = await tool(mcp, 'atelier_exec_in_sandbox', {
      workshop_id: ws,
      command: "ln -s /etc/passwd link && printf 'a\\000b' > bin.dat && head -c 1100000 /dev/zero | tr '\\0' a > big.txt",
    });
    assert.equal(prep.structuredContent!.exit_code, 0, textOf(prep));
    assertToolError(await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: 'link' }), 'PERMISSION_DENIED', /outside/);
    assertToolError(await tool(mcp, 'atelier_write_file', { workshop_id: ws, path: 'link', content: 'x' }), 'PERMISSION_DENIED');
    assertToolError(await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: 'bin.dat' }), 'UNSUPPORTED', /binary/);
    assertToolError(await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: 'big.txt' }), 'PAYLOAD_TOO_LARGE', /head/);
    assertToolError(await tool(mcp, 'atelier_read_file', { workshop_id: ws, path: 'missing.txt' }), 'NOT_FOUND');
  });

  it('an unknown workshop or a malformed argument is a tool error, never an empty success', async () => {
    assertToolError(
      await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: 'ws-nothing', command: 'true' }),
      'WORKSHOP_NOT_FOUND',
      /atelier_list_sandboxes/,
    );
    // A name is a workshop_id too (one that names no workshop is not found); anything else is malformed.
    assertToolError(
      await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: 'nope', command: 'true' }),
      'WORKSHOP_NOT_FOUND',
      /nope does not exist/,
    );
    const bad = await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: 'No Pe!', command: 'true' });
    assert.equal(bad.isError, true);
    assert.match(textOf(bad), /its id \(ws-3f8k2m9q\) or its name/);
    const empty = await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: ws, command: '' });
    assert.equal(empty.isError, true);
    assert.match(textOf(empty), /command is empty/);
  });

  it('a suspended workshop says to resume; suspend and resume work', async () => {
    const s = await tool(mcp, 'atelier_suspend', { workshop_id: ws });
    assert.equal(s.structuredContent!.status, 'Suspended', textOf(s));
    assertToolError(
      await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: ws, command: 'true' }),
      'WORKSHOP_SUSPENDED',
      new RegExp(`atelier_resume with workshop_id ${ws}`),
    );
    assertToolError(await tool(mcp, 'atelier_write_file', { workshop_id: ws, path: 'a', content: 'b' }), 'WORKSHOP_SUSPENDED');
    const r = await tool(mcp, 'atelier_resume', { workshop_id: ws });
    assert.equal(r.structuredContent!.status, 'Running', textOf(r));
    assert.equal((await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: ws, command: 'true' })).structuredContent!.exit_code, 0);
  });

  it('creates a sandbox, and refuses a repository it cannot use', async () => {
    const c = await tool(mcp, 'atelier_create_sandbox', { repo_url: repo, max_budget_usd: 2.5 });
    assert.equal(c.isError, undefined, textOf(c));
    assert.equal(c.structuredContent!.status, 'Running');
    assert.equal(c.structuredContent!.max_budget_usd, 2.5);
    const bad = await tool(mcp, 'atelier_create_sandbox', { repo_url: '/nonexistent/nowhere' });
    assert.equal(bad.isError, true);
    assert.match(textOf(bad), /^REPO_(REFUSED|NOT_FOUND): /);
    await server.api('DELETE', `/v1/workshops/${c.structuredContent!.id as string}`);
  });

  it('--workshop scopes every tool to one workshop', async () => {
    const scoped = await serve(server, ['--workshop', ws]);
    try {
      const names = (await scoped.client.listTools()).tools.map((t) => t.name).sort();
      assert.deepEqual(
        names,
        ALL_TOOLS.filter((n) => n !== 'atelier_create_sandbox'),
      );
      const list = await tool(scoped, 'atelier_list_sandboxes');
      assert.deepEqual(
        (list.structuredContent!.sandboxes as { id: string }[]).map((s) => s.id),
        [ws],
      );
      const own = await tool(scoped, 'atelier_exec_in_sandbox', { command: 'echo $ATELIER_WORKSHOP_ID' });
      assert.equal(own.structuredContent!.stdout, `${ws}\n`);
      assertToolError(
        await tool(scoped, 'atelier_exec_in_sandbox', { workshop_id: other, command: 'true' }),
        'PERMISSION_DENIED',
        /--workshop/,
      );
      assertToolError(await tool(scoped, 'atelier_read_file', { workshop_id: other, path: 'README.md' }), 'PERMISSION_DENIED');
      // An exec of another workshop is not reachable through the scoped server either.
      const elsewhere = await tool(mcp, 'atelier_exec_in_sandbox', { workshop_id: other, command: 'true' });
      assertToolError(await tool(scoped, 'atelier_exec_status', { exec_id: elsewhere.structuredContent!.exec_id }), 'NOT_FOUND');
      assert.deepEqual(scoped.transportErrors, []);
    } finally {
      await scoped.close();
    }
  });

  it('--read-only exposes only list, read and diff', async () => {
    const ro = await serve(server, ['--read-only']);
    try {
      const names = (await ro.client.listTools()).tools.map((t) => t.name).sort();
      assert.deepEqual(names, ['atelier_git_diff', 'atelier_list_sandboxes', 'atelier_read_file']);
      const r = await ro.client.callTool({ name: 'atelier_exec_in_sandbox', arguments: { workshop_id: ws, command: 'true' } });
      assert.equal(r.isError, true);
      assert.match(textOf(r as Result), /not found|unknown tool/i);
      assert.equal((await tool(ro, 'atelier_read_file', { workshop_id: ws, path: 'README.md' })).structuredContent!.content, '# hello\n');
    } finally {
      await ro.close();
    }
  });

  it('keeps stdout for MCP only and says on stderr what it serves', async () => {
    assert.deepEqual(mcp.transportErrors, []);
    assert.match(mcp.stderr(), /atelier MCP server on stdio/);
  });

  it('an unknown context fails at start with the reason on stderr and nothing on stdout', async () => {
    const r = await server.cli(['mcp', 'serve', '--context', 'nope']);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /context "nope" does not exist/);
  });
});
