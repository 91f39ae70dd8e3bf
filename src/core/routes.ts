import type { z } from 'zod';
import { serverRoutes } from './routeTable/server.js';
import { signInRoutes } from './routeTable/signIn.js';
import { usersRoutes } from './routeTable/users.js';
import { workshopsRoutes } from './routeTable/workshops.js';
import { simulatorsRoutes } from './routeTable/simulators.js';
import { terminalsRoutes } from './routeTable/terminals.js';
import { approvalsRoutes } from './routeTable/approvals.js';
import { secretsRoutes } from './routeTable/secrets.js';
import { actionsRoutes } from './routeTable/actions.js';
import { dashboardRoutes } from './routeTable/dashboard.js';

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

export const ROUTES = {
  ...serverRoutes,
  ...signInRoutes,
  ...usersRoutes,
  ...workshopsRoutes,
  ...simulatorsRoutes,
  ...terminalsRoutes,
  ...approvalsRoutes,
  ...secretsRoutes,
  ...actionsRoutes,
  ...dashboardRoutes,
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
