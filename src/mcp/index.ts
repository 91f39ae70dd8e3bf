/** The local stdio MCP server (`atelier mcp serve`) and its tools. */
export { createLocalMcpServer, DEFAULT_EXEC_WAIT_SECONDS, MAX_READ_FILE_BYTES, MAX_WRITE_FILE_BYTES } from './localServer.js';
export type { AtelierApi, LocalServerOptions } from './localServer.js';
