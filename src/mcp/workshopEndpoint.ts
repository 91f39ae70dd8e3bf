import type { FastifyInstance, FastifyRequest } from 'fastify';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { AtelierError } from '../core/index.js';
import { APPROVAL_CATEGORIES, type ApprovalRequest, type ApprovalService } from '../approvals/index.js';
import type { Principal, RouteAccess } from '../identity/index.js';
import type { SimulatorView, WorkshopService } from '../workshops/index.js';
import { workshopOfConnection } from './gateway.js';

/** What a workshop's agent finds in its environment (ATELIER_MCP_URL). */
export const WORKSHOP_MCP_URL = 'http://mcp.atelier.internal/mcp';

/** How often request_approval says it is still waiting (a progress notification). */
export const APPROVAL_PROGRESS_SECONDS = 5;

// The route lets agent tokens through; the handler then requires one (see below).
const AGENT: RouteAccess = { role: 'viewer', agent: true };

export interface WorkshopMcpDeps {
  workshops: WorkshopService;
  approvals?: ApprovalService | undefined;
  version: string;
  /** Who sent the request, as the server's authentication found it (its hooks run before this route). */
  principalOf(request: FastifyRequest): Principal;
}

const simulatorOut = z.object({
  name: z.string().describe('reachable inside the workshop as <name>.atelier.internal'),
  type: z.string(),
  version: z.string().nullable(),
  status: z.enum(['Starting', 'Running', 'Failed', 'Stopped']).describe('Stopped: stopped by a person; it is started again by a reset'),
  status_reason: z.string().nullable(),
  host: z.string().nullable(),
  port: z.number().int().nullable(),
  env: z.record(z.string(), z.string()).describe('connection details, e.g. DATABASE_URL, REDIS_URL (also in new commands’ environment)'),
});

function toSimulator(v: SimulatorView): z.infer<typeof simulatorOut> {
  return {
    name: v.name,
    type: v.type,
    version: v.version,
    status: v.status,
    status_reason: v.statusReason,
    host: v.endpoint?.host ?? null,
    port: v.endpoint?.port ?? null,
    env: v.env,
  };
}

const approvalOut = {
  approval_id: z.string(),
  category: z.string(),
  status: z.enum(['PENDING', 'APPROVED', 'REJECTED', 'EXPIRED']),
  decided_by: z.string().nullable(),
  reason: z.string().nullable().describe('why it was approved or rejected, as the person who decided wrote it'),
  expires_at: z.string(),
  effect_applied_at: z
    .string()
    .nullable()
    .describe('approved requests: when the server applied the effect (domain added, secret granted…)'),
  effect_error: z.string().nullable(),
};

function fail(err: unknown): CallToolResult {
  const e = err instanceof AtelierError ? err : new AtelierError('INTERNAL', 'unexpected failure: the server log has the details');
  return { isError: true, content: [{ type: 'text', text: `${e.code}: ${e.message.replace(/\.$/, '')}.` }] };
}

function ok<T extends Record<string, unknown>>(structured: T, text: string): CallToolResult {
  return { content: [{ type: 'text', text }], structuredContent: structured };
}

/**
 * The in-workshop MCP server's tools, acting as the workshop's agent (`actor`): simulators,
 * approvals (waits for the decision, with progress notifications), whoami. One per request
 * (stateless Streamable HTTP): nothing is held between calls but what PostgreSQL holds.
 */
export function createWorkshopMcpServer(deps: WorkshopMcpDeps, actor: Principal, workshopId: string, gone: AbortSignal): McpServer {
  const { workshops, approvals } = deps;
  const server = new McpServer({ name: 'atelier-workshop', version: deps.version }, { capabilities: { tools: {} } });

  server.registerTool(
    'request_simulator',
    {
      title: 'Start a simulator',
      description:
        'Starts a throwaway service for this workshop (postgres, redis, localstack, wiremock) and returns once it accepts connections, with how to reach it (<name>.atelier.internal and environment variables such as DATABASE_URL). Asking again for a running one returns it as it is.',
      inputSchema: {
        type: z.string().min(1).max(40).describe('postgres, redis, localstack or wiremock'),
        version: z.string().min(1).max(40).optional().describe('e.g. "16" for postgres; default: the one installed'),
        options: z
          .object({
            name: z.string().min(1).max(63).optional().describe('its name inside the workshop (default: the type’s usual one)'),
            env: z.record(z.string().max(128), z.string().max(4096)).optional(),
            services: z.array(z.string().min(1).max(40)).max(20).optional().describe('localstack: s3, sqs, dynamodb'),
            stubsDirectory: z.string().min(1).max(4096).optional().describe('wiremock: a directory of the repository with mappings/'),
          })
          .strict()
          .optional(),
      },
      outputSchema: simulatorOut.shape,
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async (args) => {
      try {
        const v = await workshops.requestSimulator(
          workshopId,
          {
            type: args.type,
            ...(args.version !== undefined ? { version: args.version } : {}),
            ...(args.options ?? {}),
          },
          actor,
        );
        const s = toSimulator(v);
        if (s.status !== 'Running')
          return fail(
            new AtelierError(
              'UNAVAILABLE',
              `simulator ${s.name} is ${s.status}: ${s.status_reason ?? 'no reason given'}; its log: \`atelier simulators logs\``,
            ),
          );
        const env = Object.entries(s.env)
          .map(([k, val]) => `${k}=${val}`)
          .join('\n');
        return ok(s, `${s.type} ${s.name} is running at ${s.host}:${s.port}${env ? `\n${env}` : ''}`);
      } catch (err) {
        return fail(err);
      }
    },
  );

  server.registerTool(
    'list_simulators',
    {
      title: 'List simulators',
      description: 'The simulators of this workshop: state, where to reach them, connection details.',
      inputSchema: {},
      outputSchema: { simulators: z.array(simulatorOut) },
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async () => {
      try {
        const items = (await workshops.listSimulators(workshopId, actor)).map(toSimulator);
        const text = items.length
          ? items.map((s) => `${s.name} (${s.type}) ${s.status}${s.host ? ` at ${s.host}:${s.port}` : ''}`).join('\n')
          : 'no simulators: start one with request_simulator';
        return ok({ simulators: items }, text);
      } catch (err) {
        return fail(err);
      }
    },
  );

  server.registerTool(
    'whoami',
    {
      title: 'Who am I',
      description: 'The workshop this endpoint acts for, its owner, tenant and the role the agent has there.',
      inputSchema: {},
      outputSchema: {
        workshop_id: z.string(),
        workshop_name: z.string(),
        workshop_status: z.string(),
        user: z.string().describe('the workshop owner the agent acts for'),
        tenant: z.string(),
        role: z.string(),
        token_expires_at: z.string().nullable(),
      },
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async () => {
      try {
        const w = await workshops.get(workshopId, actor);
        const out = {
          workshop_id: w.id,
          workshop_name: w.name,
          workshop_status: w.status,
          user: actor.userName,
          tenant: actor.tenantName,
          role: actor.role,
          token_expires_at: actor.expiresAt,
        };
        return ok(
          out,
          `workshop ${w.id} (${w.name}, ${w.status}), agent of ${actor.userName} in tenant ${actor.tenantName}, role ${actor.role}`,
        );
      } catch (err) {
        return fail(err);
      }
    },
  );

  if (approvals) {
    server.registerTool(
      'request_approval',
      {
        title: 'Ask a person for approval',
        description:
          'Files an approval request for this workshop and waits for a person to decide (progress notifications every few seconds while it waits). Returns APPROVED, REJECTED with the reason, or EXPIRED when nobody decided in time (then the answer is no). Categories: ALLOWLIST_EXPANSION (payload: host, port?, justification), SECRET_REQUEST (name, justification; with host, and optionally header and value such as "Bearer ${secret:NAME}", the proxy adds the secret to requests to that host and the value never enters the workshop (mode use, preferred); without a host the value is put inside the workshop (mode reveal, riskier)), PR_GATEWAY (branch, title, justification), SHELL_COMMAND (command, justification). If this call is cut short, the request stays filed: its id is in the first progress message.',
        inputSchema: {
          category: z.enum(APPROVAL_CATEGORIES),
          payload: z.record(z.string(), z.unknown()).describe('what is asked, with a "justification" a person can judge'),
          ttl_seconds: z
            .number()
            .int()
            .min(1)
            .max(86400)
            .optional()
            .describe('expire sooner than the server’s TTL for the category (never later)'),
        },
        outputSchema: approvalOut,
        annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
      },
      async (args, extra) => {
        try {
          const created = await approvals.create(
            workshopId,
            { category: args.category, payload: args.payload, ...(args.ttl_seconds !== undefined ? { ttlSeconds: args.ttl_seconds } : {}) },
            actor,
            { channel: 'api', ip: null },
          );
          const token = extra._meta?.progressToken;
          const started = Date.now();
          let a: ApprovalRequest = created;
          // Ends when decided or expired, or when the client goes away (the request stays filed).
          const cut = AbortSignal.any([gone, extra.signal]);
          for (let step = 0; a.status === 'PENDING' && !cut.aborted; step++) {
            if (token !== undefined)
              await extra.sendNotification({
                method: 'notifications/progress',
                params: {
                  progressToken: token,
                  progress: Math.round((Date.now() - started) / 1000),
                  message: `waiting for a person to decide on approval ${a.id} (${a.category}); it expires at ${a.expiresAt}`,
                },
              });
            a = await approvals.wait(a.id, actor, APPROVAL_PROGRESS_SECONDS * 1000, cut);
          }
          const out = {
            approval_id: a.id,
            category: a.category,
            status: a.status,
            decided_by: a.decidedBy,
            reason: a.decisionReason,
            expires_at: a.expiresAt,
            effect_applied_at: a.effect.appliedAt,
            effect_error: a.effect.error,
          };
          const text =
            a.status === 'APPROVED'
              ? `APPROVED by ${a.decidedBy ?? 'a person'}: ${a.decisionReason ?? ''}`
              : a.status === 'REJECTED'
                ? `REJECTED by ${a.decidedBy ?? 'a person'}: ${a.decisionReason ?? ''}. Do not retry the same request; change the approach or ask the user.`
                : a.status === 'EXPIRED'
                  ? `EXPIRED: nobody decided before ${a.expiresAt}, so the answer is no. Ask the user before filing it again.`
                  : `still PENDING (approval ${a.id}): the wait was cut short`;
          // Approved, rejected and expired are answers; only a wait cut short is a failure.
          return { ...ok(out, text), ...(a.status === 'PENDING' ? { isError: true } : {}) };
        } catch (err) {
          return fail(err);
        }
      },
    );
  }
  return server;
}

/** The caller of /mcp: an agent token of the workshop the connection came from (when it came through one). */
function agentOf(principal: Principal, from: string | undefined): { actor: Principal; workshopId: string } {
  if (principal.kind !== 'agent' || !principal.workshopId)
    throw new AtelierError(
      'PERMISSION_DENIED',
      'the /mcp endpoint is a workshop’s own (its agent token, ATELIER_TOKEN): from outside a workshop use `atelier mcp serve`',
    );
  if (from !== undefined && from !== principal.workshopId)
    throw new AtelierError(
      'PERMISSION_DENIED',
      `this endpoint serves workshop ${from}: the token given is another workshop's; send no Authorization header to act as this workshop`,
    );
  return { actor: principal, workshopId: principal.workshopId };
}

/**
 * `/mcp`: Streamable HTTP, stateless (a server and transport per POST, answered as an SSE stream so
 * that a long call can send progress). GET (a standalone notification stream) and DELETE (ending a
 * session) have nothing to serve without sessions: 405, as the specification allows.
 */
export function workshopMcpRoutes(app: FastifyInstance, deps: WorkshopMcpDeps): void {
  app.post('/mcp', { config: { access: AGENT }, bodyLimit: 4 << 20 }, async (request, reply) => {
    const { actor, workshopId } = agentOf(deps.principalOf(request), workshopOfConnection(request.raw.socket));
    const gone = new AbortController();
    const server = createWorkshopMcpServer(deps, actor, workshopId, gone.signal);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    reply.hijack();
    reply.raw.on('close', () => {
      gone.abort();
      void transport.close().catch(() => undefined);
      void server.close().catch(() => undefined);
    });
    try {
      await server.connect(transport);
      await transport.handleRequest(request.raw, reply.raw, request.body);
    } catch (err) {
      request.log.warn({ err: (err as Error).message }, 'MCP request failed');
      if (!reply.raw.headersSent) {
        reply.raw.writeHead(500, { 'content-type': 'application/json' });
        reply.raw.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'internal error' }, id: null }));
      } else reply.raw.end();
    }
  });
  for (const method of ['GET', 'DELETE'] as const) {
    app.route({
      method,
      url: '/mcp',
      config: { access: AGENT },
      handler: async (request, reply) => {
        agentOf(deps.principalOf(request), workshopOfConnection(request.raw.socket));
        return reply
          .status(405)
          .header('allow', 'POST')
          .send({ jsonrpc: '2.0', error: { code: -32000, message: 'this endpoint is stateless: send requests with POST' }, id: null });
      },
    });
  }
}
