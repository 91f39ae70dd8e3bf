export { AtelierError, ERROR_STATUS, isErrorCode } from './errors.js';
export type { ErrorBody, ErrorCode } from './errors.js';
export { hashToken, isWorkshopId, newApiToken, newId, newRequestId, newWorkshopId } from './ids.js';
export { formatSize, loadConfig, parseListen, parseSize } from './config.js';
export type { Config } from './config.js';
export { CreateWorkshopRequest, ExecRequest, SIMULATOR_OPTIONS, SimulatorRequest, WORKSHOP_STATUSES, describeZodError } from './schemas.js';
export type {
  CreatePhase,
  CreatePhaseEvent,
  CreateWorkshopFrame,
  ExecFrame,
  ExecResult,
  LlmSpend,
  SimulatorOptionType,
  Workshop,
  WorkshopDisk,
  WorkshopEgressEntry,
  WorkshopLimits,
  WorkshopStatus,
} from './schemas.js';
export {
  clientConfigFiles,
  readClientConfig,
  readFileCredential,
  readToken,
  writeClientConfig,
  writeFileCredential,
  writeToken,
} from './clientConfig.js';
export type { ClientConfig, ClientContext, ConfigIo, Credential } from './clientConfig.js';
export { loadYaml } from './yaml.js';
export {
  PTY_SIGNALS,
  PtyStart,
  TerminalControl,
  TUNNEL_CUT_MESSAGE,
  TUNNEL_ID_HEADER,
  TUNNEL_MODE_HEADER,
  TUNNEL_MODE_RAW,
  TUNNEL_PROTOCOL,
  TUNNEL_RESET_INSIDE_MESSAGE,
  TUNNEL_RESUMED_HEADER,
} from './terminals.js';
export type { TerminalEvent, TunnelOutcome } from './terminals.js';
export { syncDir, tlsFiles, writeFileAtomic } from './files.js';
export type { AtomicWriteOptions } from './files.js';
export { PYTHON_LIB_VARIABLE, pythonLibDir, pythonLibEnv } from './python.js';
export * from './api.js';
export { ROUTES, ROUTES_OUTSIDE_TABLE, pathParamNames, routeUrl } from './routes.js';
export type { PathParams, RouteBody, RouteDef, RouteName, RouteParams, RouteQuery, RouteResponse, Routes } from './routes.js';
export { openApiDocument } from './openapi.js';
