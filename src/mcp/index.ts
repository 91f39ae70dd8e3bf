/** MCP, both ends: the local stdio server (`atelier mcp serve`) and the in-workshop endpoint (`mcp.atelier.internal`). */
export { createLocalMcpServer, DEFAULT_EXEC_WAIT_SECONDS, MAX_READ_FILE_BYTES, MAX_WRITE_FILE_BYTES } from './localServer.js';
export type { AtelierApi, LocalServerOptions } from './localServer.js';
export { McpGateway } from './gateway.js';
export type { McpGatewayOptions } from './gateway.js';
export { workshopMcpRoutes } from './workshopEndpoint.js';
export type { WorkshopMcpDeps } from './workshopEndpoint.js';
