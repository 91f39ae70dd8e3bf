import { z } from 'zod';
import {
  ActionExecutionSchema,
  ActionJournal,
  ActionPlanSchema,
  AddProjectRequest,
  AddSshKeyRequest,
  AddUserRequest,
  SetUserEmailRequest,
  APPROVAL_CATEGORIES,
  APPROVAL_STATUSES,
  ApplyPlanRequest,
  ApprovalAuditEntry,
  ApprovalRequestSchema,
  AuditVerification,
  AuthConfig,
  CatalogItemSchema,
  ConsoleCatalog,
  ConsoleRequest,
  ConsoleResult,
  CreateApprovalRequest,
  CreateTokenRequest,
  CsrfToken,
  DecideApprovalRequest,
  EgressRecord,
  ExecutionSummarySchema,
  ExecResultSchema,
  ExecView,
  FileWritten,
  GitDiff,
  Health,
  itemsOf,
  MAX_EXEC_WAIT_SECONDS,
  PlanActionRequest,
  ProjectView,
  RollbackRequest,
  RouteCatalog,
  SecretInfo,
  ServerStatus,
  SessionInfo,
  SetSecretRequest,
  CredentialPolicy,
  CredentialPolicyView,
  SimulatorView,
  SshKeyView,
  StartExecRequest,
  StartSessionRequest,
  TokenView,
  TunnelOutcomeSchema,
  UserView,
  Whoami,
  WorkshopSchema,
  WorkshopSshInfo,
  SetBudgetRequest,
  SpendReportSchema,
  NodeRemoval,
  NodeView,
} from './api.js';
import { CreateWorkshopRequest, ExecRequest, SimulatorRequest } from './schemas.js';

const CONCERNS_ME = z
  .enum(['me'])
  .optional()
  .describe('only what concerns the caller: the workshops they own, or every workshop of the tenant for a maintainer or admin');

/**
 * The route table of the HTTP API: every route's method, path, query, request body and answer,
 * written once. The server is checked against it (none missing, none extra), the OpenAPI
 * document at `GET /v1/openapi.json` is generated from it, and the SDK (`atelier/sdk`, which
 * the CLI itself uses) takes its paths and types from it.
 *
 * Path parameters are the `:name` segments of `path`. A query schema's fields are what the
 * server's query parser reads (numbers and booleans travel as text). `produces` names an answer
 * that is not one JSON document: NDJSON or bytes, or a WebSocket / `atelier-tunnel` upgrade.
 */
export interface RouteDef {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  summary: string;
  /** The area, as the API reference groups routes. */
  tag: string;
  /** `public`: no token (how one gets a token, health); `bearer`: `Authorization: Bearer <token>`. */
  auth: 'public' | 'bearer';
  query?: z.ZodObject;
  /** The JSON request body. */
  body?: z.ZodType;
  /** A request body that is not JSON. */
  consumes?: 'application/octet-stream' | 'application/x-www-form-urlencoded';
  /** The success status (200 unless said). */
  status?: 200 | 201 | 204;
  /** The JSON answer (with `produces`, the answer when the client asks for JSON). */
  response?: z.ZodType;
  produces?: 'application/x-ndjson' | 'application/octet-stream' | 'text/plain' | 'websocket' | 'atelier-tunnel';
}

/** Routes the server serves outside the table, and why: none is part of the REST API a client scripts. */
export const ROUTES_OUTSIDE_TABLE = [
  { method: 'GET', path: '/install.sh', why: 'the bootstrap shell script (scripts/get.sh) that `curl … | sh` runs' },
  { method: 'GET', path: '/metrics', why: 'Prometheus text exposition, for a scraper' },
  {
    method: 'GET',
    path: '/.well-known/acme-challenge/:token',
    why: 'ACME http-01 answers the CA fetches while `server install` asks for a certificate',
  },
  { method: 'GET', path: '/oidc/*', why: "the embedded OIDC issuer's own endpoints (discovery, JWKS, authorize…)" },
  { method: 'POST', path: '/oidc/*', why: "the embedded OIDC issuer's own endpoints (token, revocation…)" },
  { method: 'OPTIONS', path: '/oidc/*', why: "the embedded OIDC issuer's CORS preflights" },
  { method: 'GET', path: '/oidc/interaction/:uid', why: "the embedded issuer's login page (HTML)" },
  { method: 'POST', path: '/oidc/interaction/:uid/login', why: "the embedded issuer's login form" },
  { method: 'POST', path: '/oidc/interaction/:uid/password', why: "the embedded issuer's password-change form" },
  { method: 'POST', path: '/oidc/interaction/:uid/consent', why: "the embedded issuer's consent form" },
  { method: 'POST', path: '/oidc/interaction/:uid/abort', why: "the embedded issuer's cancel button" },
  { method: 'POST', path: '/mcp', why: 'the in-workshop MCP endpoint (Streamable HTTP): an MCP client speaks it' },
  { method: 'GET', path: '/mcp', why: 'the in-workshop MCP endpoint (Streamable HTTP): an MCP client speaks it' },
  { method: 'DELETE', path: '/mcp', why: 'the in-workshop MCP endpoint (Streamable HTTP): an MCP client speaks it' },
  { method: 'POST', path: '/v1/webhooks/slack/interactions', why: "Slack's button clicks, authenticated by Slack's signature" },
  { method: 'GET', path: '/', why: 'the dashboard (docs/dashboard.md): its built single-page app' },
  { method: 'GET', path: '/*', why: "the dashboard's files, and its pages (the app routes in the browser); API paths stay 404" },
  { method: 'GET', path: '/auth/web/login', why: "the dashboard's sign-in: a redirect to the issuer (authorization code + PKCE)" },
  { method: 'GET', path: '/auth/web/callback', why: "the dashboard's sign-in: the issuer sends the browser back here" },
  { method: 'GET', path: '/auth/web/session', why: 'the dashboard asks who is signed in (its session cookie), and its CSRF token' },
  { method: 'POST', path: '/auth/web/tenant', why: "the dashboard's tenant switch (session cookie + CSRF header)" },
  { method: 'POST', path: '/auth/web/logout', why: "the dashboard's sign-out: revokes the session's grant" },
] as const;

const ok = <T extends z.ZodRawShape>(shape: T): z.ZodObject<T> => z.object(shape);
const resume = z.boolean().optional().describe('resume a suspended workshop first (default true)');

export const ROUTES = {
  // ---- server ----
  health: {
    method: 'GET',
    path: '/healthz',
    summary: 'whether the server and its database answer (503 when the database does not)',
    tag: 'server',
    auth: 'public',
    response: Health,
  },
  openapi: {
    method: 'GET',
    path: '/v1/openapi.json',
    summary: 'this API as an OpenAPI 3.1 document',
    tag: 'server',
    auth: 'public',
    response: z.looseObject({ openapi: z.string() }),
  },
  listRoutes: {
    method: 'GET',
    path: '/v1/admin/routes',
    summary: 'every route the server serves, with its access rule (admins)',
    tag: 'server',
    auth: 'bearer',
    response: RouteCatalog,
  },
  serverStatus: {
    method: 'GET',
    path: '/v1/admin/status',
    summary: 'the running server: version, uptime, database, disk, workshops by state, simulators, last errors (server admins)',
    tag: 'server',
    auth: 'bearer',
    response: ServerStatus,
  },
  listNodes: {
    method: 'GET',
    path: '/v1/nodes',
    summary: 'the nodes of the installation (every server on this PostgreSQL): address, version, load, last heartbeat, state',
    tag: 'server',
    auth: 'bearer',
    response: itemsOf(NodeView),
  },
  drainNode: {
    method: 'POST',
    path: '/v1/nodes/:name/drain',
    summary: 'no new workshops on this node (those it runs stay); server admins',
    tag: 'server',
    auth: 'bearer',
    response: NodeView,
  },
  undrainNode: {
    method: 'POST',
    path: '/v1/nodes/:name/undrain',
    summary: 'the node takes new workshops again; server admins',
    tag: 'server',
    auth: 'bearer',
    response: NodeView,
  },
  removeNode: {
    method: 'DELETE',
    path: '/v1/nodes/:name',
    summary:
      'take a dead node out of the installation (refused for a live one); its workshops stay, NodeUnreachable, deletable; server admins',
    tag: 'server',
    auth: 'bearer',
    response: NodeRemoval,
  },
  rotateSigningKeys: {
    method: 'POST',
    path: '/v1/admin/signing-keys/rotate',
    summary: "rotate the embedded issuer's signing key (server admins); nobody is logged out",
    tag: 'identity',
    auth: 'bearer',
    response: ok({ kid: z.string() }),
  },

  // ---- sign-in (public: how one gets a token) ----
  authConfig: {
    method: 'GET',
    path: '/v1/auth/config',
    summary: 'which issuer and client the CLI logs in with, and the relay endpoints',
    tag: 'identity',
    auth: 'public',
    response: AuthConfig,
  },
  deviceCode: {
    method: 'POST',
    path: '/v1/auth/device/code',
    summary: "device authorization (RFC 8628), relayed to the issuer; the issuer's answer unchanged",
    tag: 'identity',
    auth: 'public',
    consumes: 'application/x-www-form-urlencoded',
    response: z.looseObject({}),
  },
  deviceToken: {
    method: 'POST',
    path: '/v1/auth/device/token',
    summary: 'token endpoint (device_code and refresh_token grants), relayed to the issuer',
    tag: 'identity',
    auth: 'public',
    consumes: 'application/x-www-form-urlencoded',
    response: z.looseObject({}),
  },
  revokeSession: {
    method: 'POST',
    path: '/v1/auth/revoke',
    summary: 'token revocation (RFC 7009), relayed to the issuer',
    tag: 'identity',
    auth: 'public',
    consumes: 'application/x-www-form-urlencoded',
    response: z.looseObject({}),
  },
  whoami: {
    method: 'GET',
    path: '/v1/auth/whoami',
    summary: 'the caller: user, tenant, role, token',
    tag: 'identity',
    auth: 'bearer',
    response: Whoami,
  },

  // ---- users and tokens ----
  listUsers: {
    method: 'GET',
    path: '/v1/users',
    summary: 'users of the tenant (admins)',
    tag: 'identity',
    auth: 'bearer',
    response: itemsOf(UserView),
  },
  addUser: {
    method: 'POST',
    path: '/v1/users',
    summary: 'add a local account; its one-time temporary password is answered once (admins)',
    tag: 'identity',
    auth: 'bearer',
    body: AddUserRequest,
    status: 201,
    response: ok({ user: UserView, temporaryPassword: z.string().nullable() }),
  },
  setUserEmail: {
    method: 'PUT',
    path: '/v1/users/:user/email',
    summary: "change an account's e-mail address, which Slack decisions are matched by (server admins)",
    tag: 'identity',
    auth: 'bearer',
    body: SetUserEmailRequest,
    response: UserView,
  },
  disableUser: {
    method: 'POST',
    path: '/v1/users/:user/disable',
    summary: 'disable an account everywhere (server admins)',
    tag: 'identity',
    auth: 'bearer',
    response: UserView,
  },
  createToken: {
    method: 'POST',
    path: '/v1/tokens',
    summary: 'create an API token; its secret is answered once',
    tag: 'identity',
    auth: 'bearer',
    body: CreateTokenRequest,
    status: 201,
    response: TokenView.extend({ token: z.string() }),
  },
  listTokens: {
    method: 'GET',
    path: '/v1/tokens',
    summary: 'API tokens (never their secret)',
    tag: 'identity',
    auth: 'bearer',
    response: itemsOf(TokenView),
  },
  revokeToken: {
    method: 'DELETE',
    path: '/v1/tokens/:id',
    summary: 'revoke an API token: it stops working at once',
    tag: 'identity',
    auth: 'bearer',
    response: ok({ id: z.string(), revoked: z.literal(true) }),
  },

  // ---- workshops ----
  createWorkshop: {
    method: 'POST',
    path: '/v1/workshops',
    summary:
      'clone a repository into a new sandbox and start it; with `Accept: application/x-ndjson`, its phases as NDJSON frames (`{phase,step,state,ms}`), then `{workshop}`',
    tag: 'workshops',
    auth: 'bearer',
    body: CreateWorkshopRequest,
    status: 201,
    response: WorkshopSchema,
    produces: 'application/x-ndjson',
  },
  listWorkshops: {
    method: 'GET',
    path: '/v1/workshops',
    summary: 'workshops the caller may see',
    tag: 'workshops',
    auth: 'bearer',
    response: itemsOf(WorkshopSchema),
  },
  getWorkshop: {
    method: 'GET',
    path: '/v1/workshops/:id',
    summary: 'one workshop',
    tag: 'workshops',
    auth: 'bearer',
    response: WorkshopSchema,
  },
  deleteWorkshop: {
    method: 'DELETE',
    path: '/v1/workshops/:id',
    summary: 'delete a workshop and everything it owned',
    tag: 'workshops',
    auth: 'bearer',
    response: ok({ id: z.string(), deleted: z.literal(true) }),
  },
  setWorkshopBudget: {
    method: 'PUT',
    path: '/v1/workshops/:id/budget',
    summary: "set (raise, lower or remove) the workshop's LLM budget: enforced by the LLM gateway from the next model request",
    tag: 'workshops',
    auth: 'bearer',
    body: SetBudgetRequest,
    response: WorkshopSchema,
  },
  llmSpend: {
    method: 'GET',
    path: '/v1/spend',
    summary: "the tenant's spend on models through the LLM gateway, by user (members see their own line; maintainers every one)",
    tag: 'workshops',
    auth: 'bearer',
    response: SpendReportSchema,
  },
  stopWorkshop: {
    method: 'POST',
    path: '/v1/workshops/:id/stop',
    summary: 'suspend a workshop (its processes are frozen, nothing is lost)',
    tag: 'workshops',
    auth: 'bearer',
    response: WorkshopSchema,
  },
  resumeWorkshop: {
    method: 'POST',
    path: '/v1/workshops/:id/resume',
    summary: 'resume a suspended workshop exactly as it was',
    tag: 'workshops',
    auth: 'bearer',
    response: WorkshopSchema,
  },
  exec: {
    method: 'POST',
    path: '/v1/workshops/:id/exec',
    summary:
      'run a command: NDJSON frames (`{stream,data}` base64, then `{exitCode,signal}`), or one JSON result with `Accept: application/json`',
    tag: 'workshops',
    auth: 'bearer',
    body: ExecRequest,
    response: ExecResultSchema,
    produces: 'application/x-ndjson',
  },
  startExec: {
    method: 'POST',
    path: '/v1/workshops/:id/execs',
    summary: 'start a command whose output is kept, to read back by offset',
    tag: 'workshops',
    auth: 'bearer',
    body: StartExecRequest,
    status: 201,
    response: ExecView,
  },
  readExec: {
    method: 'GET',
    path: '/v1/execs/:execId',
    summary: 'a started command: its status and its output from `after` on, waiting up to `wait` seconds for it to end',
    tag: 'workshops',
    auth: 'bearer',
    query: z.object({
      after: z.number().int().min(0).optional().describe('byte offset to read from (default 0)'),
      wait: z.number().min(0).max(MAX_EXEC_WAIT_SECONDS).optional().describe('seconds to wait for the command to end (default 0)'),
    }),
    response: ExecView,
  },
  readFile: {
    method: 'GET',
    path: '/v1/workshops/:id/files',
    summary: 'the bytes of a file of the workspace',
    tag: 'workshops',
    auth: 'bearer',
    query: z.object({ path: z.string().min(1).describe('path relative to /workspace') }),
    produces: 'application/octet-stream',
  },
  writeFile: {
    method: 'PUT',
    path: '/v1/workshops/:id/files',
    summary: 'write a file of the workspace (the body is its bytes)',
    tag: 'workshops',
    auth: 'bearer',
    query: z.object({ path: z.string().min(1).describe('path relative to /workspace') }),
    consumes: 'application/octet-stream',
    response: FileWritten,
  },
  egressLog: {
    method: 'GET',
    path: '/v1/workshops/:id/egress',
    summary: "what the workshop's egress proxy allowed and denied; with follow=true, NDJSON as decisions are made",
    tag: 'workshops',
    auth: 'bearer',
    query: z.object({
      after: z.number().int().min(0).optional().describe('only decisions after this id'),
      limit: z.number().int().min(1).max(1000).optional().describe('how many (default 100)'),
      follow: z.boolean().optional().describe('keep the answer open and stream new decisions (NDJSON, at most a minute)'),
    }),
    response: itemsOf(EgressRecord),
    produces: 'application/x-ndjson',
  },
  gitDiff: {
    method: 'GET',
    path: '/v1/workshops/:id/git/diff',
    summary: "the workspace's changes against its last commit, and its untracked files",
    tag: 'workshops',
    auth: 'bearer',
    response: GitDiff,
  },

  // ---- simulators ----
  listSimulators: {
    method: 'GET',
    path: '/v1/workshops/:id/simulators',
    summary: "a workshop's simulators: state, endpoint inside the workshop, memory",
    tag: 'simulators',
    auth: 'bearer',
    response: itemsOf(SimulatorView),
  },
  requestSimulator: {
    method: 'POST',
    path: '/v1/workshops/:id/simulators',
    summary: 'start one more simulator in a running workshop',
    tag: 'simulators',
    auth: 'bearer',
    body: SimulatorRequest,
    status: 201,
    response: SimulatorView,
  },
  simulatorLogs: {
    method: 'GET',
    path: '/v1/workshops/:id/simulators/:name/logs',
    summary: "the end of a simulator's own log (text)",
    tag: 'simulators',
    auth: 'bearer',
    query: z.object({ tail: z.number().int().min(1).max(1048576).optional().describe('bytes from the end (default 64 KiB)') }),
    produces: 'text/plain',
  },
  resetSimulator: {
    method: 'POST',
    path: '/v1/workshops/:id/simulators/:name/reset',
    summary: 'return a simulator to its initial state (a stopped or failed one is started again)',
    tag: 'simulators',
    auth: 'bearer',
    response: SimulatorView,
  },
  stopSimulator: {
    method: 'POST',
    path: '/v1/workshops/:id/simulators/:name/stop',
    summary: 'stop a simulator (its files kept) until a reset starts it again',
    tag: 'simulators',
    auth: 'bearer',
    response: SimulatorView,
  },

  // ---- terminals ----
  openPty: {
    method: 'GET',
    path: '/v1/workshops/:id/pty',
    summary: 'a terminal in the workshop (WebSocket: binary frames are bytes, text frames control messages)',
    tag: 'terminals',
    auth: 'bearer',
    query: z.object({ resume }),
    produces: 'websocket',
  },
  openTunnel: {
    method: 'GET',
    path: '/v1/workshops/:id/tunnel',
    summary: 'a byte tunnel to a port of the workshop (WebSocket, or `Upgrade: atelier-tunnel` for raw bytes)',
    tag: 'terminals',
    auth: 'bearer',
    query: z.object({ port: z.number().int().min(1).max(65535).describe('TCP port inside the workshop (22: its SSH endpoint)'), resume }),
    produces: 'atelier-tunnel',
  },
  tunnelOutcome: {
    method: 'GET',
    path: '/v1/workshops/:id/tunnels/:tunnel',
    summary: 'why a raw tunnel ended',
    tag: 'terminals',
    auth: 'bearer',
    response: TunnelOutcomeSchema,
  },
  workshopSsh: {
    method: 'GET',
    path: '/v1/workshops/:id/ssh',
    summary: "the workshop's SSH host alias and host key (for ~/.ssh/config)",
    tag: 'terminals',
    auth: 'bearer',
    response: WorkshopSshInfo,
  },
  addSshKey: {
    method: 'POST',
    path: '/v1/ssh/keys',
    summary: 'register an SSH public key of yours',
    tag: 'terminals',
    auth: 'bearer',
    body: AddSshKeyRequest,
    status: 201,
    response: SshKeyView,
  },
  listSshKeys: {
    method: 'GET',
    path: '/v1/ssh/keys',
    summary: 'your SSH public keys',
    tag: 'terminals',
    auth: 'bearer',
    response: itemsOf(SshKeyView),
  },
  removeSshKey: {
    method: 'DELETE',
    path: '/v1/ssh/keys/:fingerprint',
    summary: 'forget one of your SSH public keys',
    tag: 'terminals',
    auth: 'bearer',
    response: ok({ fingerprint: z.string(), deleted: z.literal(true) }),
  },
  startSession: {
    method: 'POST',
    path: '/v1/workshops/:id/sessions',
    summary: 'start an agent session (a PTY that outlives its client); 200 with the running one if it exists',
    tag: 'terminals',
    auth: 'bearer',
    body: StartSessionRequest,
    status: 201,
    response: SessionInfo.extend({ resumed: z.boolean().describe('the workshop was suspended and has been resumed') }),
  },
  listSessions: {
    method: 'GET',
    path: '/v1/workshops/:id/sessions',
    summary: "a workshop's agent sessions",
    tag: 'terminals',
    auth: 'bearer',
    response: itemsOf(SessionInfo),
  },
  stopSession: {
    method: 'DELETE',
    path: '/v1/workshops/:id/sessions/:name',
    summary: 'stop an agent session',
    tag: 'terminals',
    auth: 'bearer',
    response: ok({ name: z.string(), stopped: z.boolean() }),
  },
  attachSession: {
    method: 'GET',
    path: '/v1/workshops/:id/sessions/:name/attach',
    summary: 'attach to an agent session (WebSocket), with its recent output',
    tag: 'terminals',
    auth: 'bearer',
    query: z.object({ resume }),
    produces: 'websocket',
  },

  // ---- approvals ----
  createApproval: {
    method: 'POST',
    path: '/v1/workshops/:id/approvals',
    summary: 'file a request that waits for a human',
    tag: 'approvals',
    auth: 'bearer',
    body: CreateApprovalRequest,
    status: 201,
    response: ApprovalRequestSchema,
  },
  listApprovals: {
    method: 'GET',
    path: '/v1/approvals',
    summary: 'approval requests of the tenant, newest first',
    tag: 'approvals',
    auth: 'bearer',
    query: z.object({
      status: z.enum(APPROVAL_STATUSES).optional(),
      category: z.enum(APPROVAL_CATEGORIES).optional(),
      workshop: z.string().min(1).optional().describe('only this workshop'),
      limit: z.number().int().min(1).max(1000).optional().describe('how many (default 100)'),
      concerns: CONCERNS_ME,
    }),
    response: itemsOf(ApprovalRequestSchema),
  },
  getApproval: {
    method: 'GET',
    path: '/v1/approvals/:id',
    summary: 'one approval request',
    tag: 'approvals',
    auth: 'bearer',
    response: ApprovalRequestSchema,
  },
  waitApproval: {
    method: 'GET',
    path: '/v1/approvals/:id/wait',
    summary: 'the request once decided or expired, or as it is after `timeout` seconds',
    tag: 'approvals',
    auth: 'bearer',
    query: z.object({ timeout: z.number().min(0).max(300).optional().describe('seconds (default 30)') }),
    response: ApprovalRequestSchema,
  },
  approvalAudit: {
    method: 'GET',
    path: '/v1/approvals/:id/audit',
    summary: "a request's audit trail, oldest first: what happened, who, channel, address, time (people only)",
    tag: 'approvals',
    auth: 'bearer',
    response: itemsOf(ApprovalAuditEntry),
  },
  decideApproval: {
    method: 'POST',
    path: '/v1/approvals/:id/decision',
    summary: 'approve or reject a request (never the one who asked)',
    tag: 'approvals',
    auth: 'bearer',
    body: DecideApprovalRequest,
    response: ApprovalRequestSchema,
  },
  approvalStream: {
    method: 'GET',
    path: '/v1/approvals/stream',
    summary: 'live approval events (WebSocket, one JSON text frame per event)',
    tag: 'approvals',
    auth: 'bearer',
    query: z.object({ concerns: CONCERNS_ME }),
    produces: 'websocket',
  },
  verifyAudit: {
    method: 'GET',
    path: '/v1/audit/verify',
    summary: 'recompute the hash chain of the approvals audit (server admins)',
    tag: 'approvals',
    auth: 'bearer',
    response: AuditVerification,
  },

  // ---- secrets ----
  listSecrets: {
    method: 'GET',
    path: '/v1/secrets',
    summary: 'names of the secrets, who set them and when (never values)',
    tag: 'secrets',
    auth: 'bearer',
    response: itemsOf(SecretInfo),
  },
  setSecret: {
    method: 'PUT',
    path: '/v1/secrets/:name',
    summary: 'set or replace a secret (maintainers)',
    tag: 'secrets',
    auth: 'bearer',
    body: SetSecretRequest,
    response: SecretInfo,
  },
  deleteSecret: {
    method: 'DELETE',
    path: '/v1/secrets/:name',
    summary: 'delete a secret; grants of it end at once (maintainers)',
    tag: 'secrets',
    auth: 'bearer',
    status: 204,
  },
  revokeSecretGrant: {
    method: 'DELETE',
    path: '/v1/secrets/grants/:id',
    summary: "end an approved SECRET_REQUEST's grant at once, by the request's id (the workshop's owner or maintainers)",
    tag: 'secrets',
    auth: 'bearer',
    status: 204,
  },

  getCredentialPolicy: {
    method: 'GET',
    path: '/v1/credential-policy',
    summary: "the tenant's credential policy: bindings every new workshop gets, hosts no binding may name",
    tag: 'secrets',
    auth: 'bearer',
    response: CredentialPolicyView,
  },
  setCredentialPolicy: {
    method: 'PUT',
    path: '/v1/credential-policy',
    summary: "replace the tenant's credential policy; applies to workshops created from then on (maintainers)",
    tag: 'secrets',
    auth: 'bearer',
    body: CredentialPolicy,
    response: CredentialPolicyView,
  },

  // ---- projects and typed actions ----
  addProject: {
    method: 'POST',
    path: '/v1/projects',
    summary: "register a project directory of the server's machine (maintainers)",
    tag: 'actions',
    auth: 'bearer',
    body: AddProjectRequest,
    status: 201,
    response: ok({ project: ProjectView, created: z.boolean() }),
  },
  listProjects: {
    method: 'GET',
    path: '/v1/projects',
    summary: 'registered projects',
    tag: 'actions',
    auth: 'bearer',
    response: itemsOf(ProjectView),
  },
  removeProject: {
    method: 'DELETE',
    path: '/v1/projects/:project',
    summary: 'forget a project (its files stay as they are)',
    tag: 'actions',
    auth: 'bearer',
    response: ok({ project: ProjectView, removed: z.literal(true) }),
  },
  listActions: {
    method: 'GET',
    path: '/api/workspace/actions',
    summary: "a project's catalog of typed actions, preconditions evaluated now",
    tag: 'actions',
    auth: 'bearer',
    query: z.object({ project: z.string().min(1).describe('project name or id') }),
    response: ok({ project: z.string(), items: z.array(CatalogItemSchema) }),
  },
  actionJournal: {
    method: 'GET',
    path: '/api/workspace/actions/journal',
    summary: "a project's actions journal",
    tag: 'actions',
    auth: 'bearer',
    query: z.object({ project: z.string().min(1).describe('project name or id') }),
    response: ActionJournal,
  },
  getPlan: {
    method: 'GET',
    path: '/api/workspace/actions/plans/:planId',
    summary: 'one plan',
    tag: 'actions',
    auth: 'bearer',
    response: ActionPlanSchema,
  },
  getExecution: {
    method: 'GET',
    path: '/api/workspace/actions/executions/:executionId',
    summary: 'one execution, as the journal records it',
    tag: 'actions',
    auth: 'bearer',
    response: ExecutionSummarySchema.extend({ project: z.string() }),
  },
  planAction: {
    method: 'POST',
    path: '/api/workspace/actions/:id/plan',
    summary: 'plan an action: everything apply would do, changing nothing (maintainers)',
    tag: 'actions',
    auth: 'bearer',
    body: PlanActionRequest,
    status: 201,
    response: ActionPlanSchema,
  },
  applyPlan: {
    method: 'POST',
    path: '/api/workspace/actions/:id/apply',
    summary: 'apply exactly that plan, verify it, journal it (maintainers)',
    tag: 'actions',
    auth: 'bearer',
    body: ApplyPlanRequest,
    response: ActionExecutionSchema,
  },
  rollbackExecution: {
    method: 'POST',
    path: '/api/workspace/actions/:id/rollback',
    summary: 'apply the inverse recorded for an execution, and verify it (maintainers)',
    tag: 'actions',
    auth: 'bearer',
    body: RollbackRequest,
    response: ActionExecutionSchema,
  },

  // ---- dashboard ----
  csrfToken: {
    method: 'GET',
    path: '/api/workspace/csrf',
    summary: "the dashboard's CSRF token (also set as a cookie)",
    tag: 'dashboard',
    auth: 'bearer',
    response: CsrfToken,
  },
  consoleCatalog: {
    method: 'GET',
    path: '/api/workspace/console',
    summary: "the dashboard Console's read-only commands",
    tag: 'dashboard',
    auth: 'bearer',
    response: ConsoleCatalog,
  },
  runConsole: {
    method: 'POST',
    path: '/api/workspace/console',
    summary: 'run one read-only `atelier` command for the dashboard Console',
    tag: 'dashboard',
    auth: 'bearer',
    body: ConsoleRequest,
    response: ConsoleResult,
  },
} as const satisfies Record<string, RouteDef>;

export type Routes = typeof ROUTES;
export type RouteName = keyof Routes;

/** `'/v1/workshops/:id/simulators/:name'` → `{ id: string; name: string }`. */
export type PathParams<P extends string> = P extends `${string}:${infer Name}/${infer Rest}`
  ? { [K in Name]: string } & PathParams<`/${Rest}`>
  : P extends `${string}:${infer Name}`
    ? { [K in Name]: string }
    : Record<never, never>;

type Field<R, K extends string> = R extends { [P in K]: infer V } ? V : undefined;

/** The path parameters of a route. */
export type RouteParams<N extends RouteName> = PathParams<Routes[N]['path']>;
/** The query a route takes (what a client gives; the server reads it as text). */
export type RouteQuery<N extends RouteName> = Field<Routes[N], 'query'> extends z.ZodType ? z.input<Field<Routes[N], 'query'>> : undefined;
/** The JSON body a route takes. */
export type RouteBody<N extends RouteName> = Field<Routes[N], 'body'> extends z.ZodType ? z.input<Field<Routes[N], 'body'>> : undefined;
/** The JSON a route answers. */
export type RouteResponse<N extends RouteName> =
  Field<Routes[N], 'response'> extends z.ZodType ? z.output<Field<Routes[N], 'response'>> : undefined;

/** The names of the path parameters of a route, in order. */
export function pathParamNames(path: string): string[] {
  return [...path.matchAll(/:([A-Za-z0-9_]+)/g)].map((m) => m[1]!);
}

/** A route's path with its parameters filled in (each percent-encoded) and its query appended. */
export function routeUrl(path: string, params: Record<string, string>, query?: Record<string, unknown>): string {
  let out = path.replace(/:([A-Za-z0-9_]+)/g, (_, name: string) => {
    const v = params[name];
    if (v === undefined) throw new TypeError(`path parameter ${name} is missing for ${path}`);
    return encodeURIComponent(v);
  });
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
    const text = q.toString();
    if (text) out += `?${text}`;
  }
  return out;
}
