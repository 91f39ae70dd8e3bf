import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createToolContext, type LocalServerOptions } from './tools/context.js';
import { registerExecTools } from './tools/exec.js';
import { registerFileTools } from './tools/files.js';
import { registerSandboxTools, registerSuspendResumeTools } from './tools/sandboxes.js';

export type { AtelierApi, LocalServerOptions } from './tools/context.js';
export { DEFAULT_EXEC_WAIT_SECONDS } from './tools/exec.js';
export { MAX_READ_FILE_BYTES, MAX_WRITE_FILE_BYTES } from './tools/files.js';

/**
 * The local stdio MCP server's tools (`atelier mcp serve`): workshops as sandboxes for a desktop
 * agent. Every failure is a tool error that starts with the Atelier error code and says what to do.
 */
export function createLocalMcpServer(opts: LocalServerOptions): McpServer {
  const server = new McpServer({ name: 'atelier', version: opts.version }, { capabilities: { tools: {} } });
  const ctx = createToolContext(server, opts);
  // The order of registration is the order of tools/list.
  registerSandboxTools(ctx);
  registerExecTools(ctx);
  registerFileTools(ctx);
  registerSuspendResumeTools(ctx);
  return server;
}
