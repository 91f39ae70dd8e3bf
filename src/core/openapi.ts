import { z } from 'zod';
import { ERROR_STATUS } from './errors.js';
import { ROUTES, pathParamNames, type RouteDef } from './routes.js';

type Json = Record<string, unknown>;

/** A zod schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect), without its `$schema` line. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  const out = z.toJSONSchema(schema, { io, unrepresentable: 'any', target: 'draft-2020-12' }) as Json;
  delete out.$schema;
  return out;
}

const ERROR_BODY: Json = {
  type: 'object',
  required: ['code', 'message'],
  properties: {
    code: { type: 'string', enum: Object.keys(ERROR_STATUS), description: 'what went wrong; clients branch on it, never on message' },
    message: { type: 'string', description: 'a sentence saying what to do next' },
    details: { type: 'object', description: 'for a bad input, `field` names it', additionalProperties: true },
    requestId: { type: 'string' },
  },
};

function operation(name: string, r: RouteDef): Json {
  const parameters: Json[] = pathParamNames(r.path).map((p) => ({ name: p, in: 'path', required: true, schema: { type: 'string' } }));
  if (r.query) {
    for (const [field, schema] of Object.entries(r.query.shape as Record<string, z.ZodType>)) {
      const s = jsonSchema(schema, 'input');
      const description = typeof s.description === 'string' ? s.description : undefined;
      delete s.description;
      parameters.push({
        name: field,
        in: 'query',
        required: !schema.safeParse(undefined).success,
        schema: s,
        ...(description ? { description } : {}),
      });
    }
  }
  const op: Json = { operationId: name, summary: r.summary, tags: [r.tag] };
  if (parameters.length > 0) op.parameters = parameters;
  if (r.auth === 'public') op.security = [];
  if (r.body) op.requestBody = { required: true, content: { 'application/json': { schema: jsonSchema(r.body, 'input') } } };
  else if (r.consumes)
    op.requestBody = {
      required: true,
      content: {
        [r.consumes]: {
          schema:
            r.consumes === 'application/octet-stream'
              ? { type: 'string', contentMediaType: 'application/octet-stream' }
              : { type: 'object' },
        },
      },
    };

  const status = String(r.status ?? 200);
  const content: Json = {};
  if (r.response) content['application/json'] = { schema: jsonSchema(r.response, 'output') };
  const responses: Json = {};
  if (r.produces === 'websocket' || r.produces === 'atelier-tunnel') {
    const how = r.produces === 'websocket' ? '`Upgrade: websocket`' : '`Upgrade: websocket` or `Upgrade: atelier-tunnel` (raw bytes)';
    responses['101'] = { description: `switching protocols: connect with ${how}` };
    responses['426'] = {
      description: 'a plain GET: this route is an upgrade',
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
    };
  } else {
    if (r.produces === 'application/x-ndjson')
      content['application/x-ndjson'] = { schema: { type: 'string', description: 'one JSON document per line' } };
    if (r.produces === 'application/octet-stream')
      content['application/octet-stream'] = { schema: { type: 'string', contentMediaType: 'application/octet-stream' } };
    if (r.produces === 'text/plain') content['text/plain'] = { schema: { type: 'string' } };
    responses[status] = { description: r.summary, ...(Object.keys(content).length > 0 ? { content } : {}) };
  }
  responses.default = { description: 'an error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
  op.responses = responses;
  return op;
}

/**
 * The OpenAPI 3.1 document of the API, generated from the route table (served at
 * `GET /v1/openapi.json`). Paths use OpenAPI's `{name}` for the table's `:name`.
 */
export function openApiDocument(opts: { version: string; serverUrl?: string }): Json {
  const paths: Record<string, Json> = {};
  for (const [name, r] of Object.entries(ROUTES as Record<string, RouteDef>)) {
    const path = r.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    (paths[path] ??= {})[r.method.toLowerCase()] = operation(name, r);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Atelier API',
      version: opts.version,
      description:
        'Run AI coding agents in contained workshops, with a human in the loop. Errors are `{ code, message, details, requestId }`.',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    ...(opts.serverUrl ? { servers: [{ url: opts.serverUrl }] } : {}),
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'an API token (`atelier tokens create`) or an OIDC access token' },
      },
      schemas: { Error: ERROR_BODY },
    },
  };
}
