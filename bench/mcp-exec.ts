/**
 * 7. MCP exec: `atelier_exec_in_sandbox` of `true` through a real `atelier mcp serve` process
 * (SDK client over stdio), beside the same async exec through the REST API it calls
 * (POST /v1/workshops/:id/execs, output stored in PostgreSQL), and the streaming exec route
 * (POST /v1/workshops/:id/exec, nothing stored). The difference of the first two is what MCP
 * adds (stdio JSON-RPC, the CLI client, schema checks); goal: under 5 ms at p50.
 */
import { loadavg } from 'node:os';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ATELIER_BIN, goalLine, heading, line, ms, statLine, summarize, type BenchServer } from './lib.js';

const RUNS = 200;
const WARMUP = 20;
const GOAL_OVERHEAD_P50_MS = 5;
const COMMAND = ['/bin/sh', '-c', 'true'];

export async function mcpExec(server: BenchServer): Promise<Record<string, unknown>> {
  heading(
    `7. MCP atelier_exec_in_sandbox of \`true\` over stdio vs the REST API (${RUNS} runs; goal: MCP overhead p50 < ${GOAL_OVERHEAD_P50_MS} ms)`,
  );
  const ws = await server.createWorkshop();
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [ATELIER_BIN, 'mcp', 'serve'],
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: server.scratch.dir,
      ATELIER_CONFIG_DIR: server.configDir,
      ATELIER_URL: server.url,
      ATELIER_TOKEN: server.token,
    },
    stderr: 'ignore',
  });
  const client = new Client({ name: 'atelier-bench', version: '1.0.0' });
  const result: Record<string, unknown> = {};
  try {
    await client.connect(transport);
    const viaMcp = async (): Promise<void> => {
      const r = (await client.callTool({ name: 'atelier_exec_in_sandbox', arguments: { workshop_id: ws.id, command: 'true' } })) as {
        isError?: boolean;
        structuredContent?: { exit_code: number | null };
      };
      if (r.isError || r.structuredContent?.exit_code !== 0) throw new Error(`MCP exec failed: ${JSON.stringify(r)}`);
    };
    const viaRest = async (): Promise<void> => {
      const v = await server.request<{ exitCode: number | null }>('POST', `/v1/workshops/${ws.id}/execs`, {
        command: COMMAND,
        waitSeconds: 20,
      });
      if (v.exitCode !== 0) throw new Error(`REST exec failed: ${JSON.stringify(v)}`);
    };
    // The floor of any stdio MCP call: one JSON-RPC round trip through the `atelier mcp serve`
    // process, no API call behind it. What the tool call adds beyond ping + REST is the server's
    // own work in that process (schemas, the HTTP client).
    const viaPing = async (): Promise<void> => {
      await client.ping();
    };
    const viaStream = async (): Promise<void> => {
      await server.exec(ws.id, COMMAND);
    };
    const measure = async (fn: () => Promise<void>, n: number, into: number[]): Promise<void> => {
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        await fn();
        into.push(performance.now() - t0);
      }
    };
    const warm: number[] = [];
    for (const fn of [viaMcp, viaRest, viaStream, viaPing]) await measure(fn, WARMUP, warm);
    // Interleaved in rounds, so that a burst of load elsewhere on the machine hits all three alike.
    const samples = { mcp: [] as number[], rest: [] as number[], stream: [] as number[], ping: [] as number[] };
    for (let round = 0; round < 4; round++) {
      await measure(viaMcp, RUNS / 4, samples.mcp);
      await measure(viaRest, RUNS / 4, samples.rest);
      await measure(viaStream, RUNS / 4, samples.stream);
      await measure(viaPing, RUNS / 4, samples.ping);
    }
    const m = summarize(samples.mcp);
    const r = summarize(samples.rest);
    const s = summarize(samples.stream);
    const p = summarize(samples.ping);
    statLine('atelier', 'MCP atelier_exec_in_sandbox over stdio', m, ['p50', 'p99']);
    statLine('peer', 'REST POST …/execs (same call the MCP server makes)', r, ['p50', 'p99']);
    statLine('(ref)', 'REST POST …/exec (streaming route, output not stored)', s, ['p50', 'p99']);
    statLine('(ref)', 'MCP ping over stdio (the process hop alone)', p, ['p50', 'p99']);
    line(`MCP overhead: p50 ${ms(m.p50 - r.p50)}, p99 ${ms(m.p99 - r.p99)}; MCP / REST (p50) ${(m.p50 / r.p50).toFixed(2)}x`);
    line(`storing the output in PostgreSQL: p50 ${ms(r.p50 - s.p50)} over the streaming route`);
    goalLine(`MCP overhead p50 < ${GOAL_OVERHEAD_P50_MS} ms`, m.p50 - r.p50, GOAL_OVERHEAD_P50_MS);
    line(
      `of which the stdio hop (ping p50): ${ms(p.p50)}; load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}`,
    );
    Object.assign(result, { mcp: m, rest: r, stream: s, ping: p, overheadP50: m.p50 - r.p50 });
  } finally {
    await client.close().catch(() => undefined);
    await server.deleteWorkshop(ws.id);
  }
  return result;
}
