import {
  AtelierError,
  ROUTES,
  isErrorCode,
  routeUrl,
  type RouteBody,
  type RouteDef,
  type RouteName,
  type RouteParams,
  type RouteQuery,
  type RouteResponse,
} from '../core/index.js';

/** One HTTP request as the SDK hands it to its transport (path already filled in, query appended). */
export interface SdkRequest {
  method: RouteDef['method'];
  path: string;
  /** A JSON body. */
  body?: unknown;
  /** A body of bytes (`application/octet-stream`). */
  raw?: Buffer;
  /** What to ask for (`application/json` unless the route answers text or bytes). */
  accept?: string;
  /** The route needs no token: send none. */
  anonymous?: boolean;
}

/**
 * How requests reach the server: `json` answers the parsed JSON (undefined for an empty body),
 * `bytes` the raw answer; both throw an AtelierError for a non-2xx answer. The default one
 * (`fetchTransport`) uses `fetch` with a bearer token; the CLI plugs in its own (contexts,
 * OIDC refresh, login hints).
 */
export interface Transport {
  json(request: SdkRequest): Promise<unknown>;
  bytes(request: SdkRequest): Promise<Buffer>;
}

/** Numbers and booleans travel as text in a query string: either is accepted. */
type QueryInput<Q> = { [K in keyof Q]: Q[K] extends number | boolean | undefined ? Q[K] | string : Q[K] };

type ParamsPart<N extends RouteName> = keyof RouteParams<N> extends never ? { params?: undefined } : { params: RouteParams<N> };
type QueryPart<N extends RouteName> =
  RouteQuery<N> extends undefined
    ? { query?: undefined }
    : Partial<RouteQuery<N>> extends RouteQuery<N>
      ? { query?: QueryInput<RouteQuery<N>> }
      : { query: QueryInput<RouteQuery<N>> };
type BodyPart<N extends RouteName> = RouteBody<N> extends undefined ? { body?: undefined } : { body: RouteBody<N> };

/** What a call takes: the route's path parameters, query and JSON body, each typed from the route table. */
export type CallArgs<N extends RouteName> = ParamsPart<N> & QueryPart<N> & BodyPart<N> & { raw?: Buffer; accept?: string };

type ArgList<N extends RouteName> = Record<string, never> extends CallArgs<N> ? [args?: CallArgs<N>] : [args: CallArgs<N>];

/**
 * A typed client of the Atelier API: every route of the table (`ROUTES` in core) by name, its
 * arguments and answer inferred from it.
 *
 * ```ts
 * const atelier = createClient({ url: 'http://127.0.0.1:7878', token: process.env.ATELIER_TOKEN });
 * const ws = await atelier.call('createWorkshop', { body: { repo: '/src/app' } });
 * const run = await atelier.call('startExec', { params: { id: ws.id }, body: { command: ['npm', 'test'], waitSeconds: 30 } });
 * ```
 */
export class AtelierClient {
  constructor(readonly transport: Transport) {}

  /** Calls a JSON route and answers its JSON. */
  async call<N extends RouteName>(name: N, ...[args]: ArgList<N>): Promise<RouteResponse<N>> {
    return (await this.transport.json(this.request(name, args))) as RouteResponse<N>;
  }

  /** Calls a route that answers bytes (a file) or text (a log): the raw answer. */
  async bytes<N extends RouteName>(name: N, ...[args]: ArgList<N>): Promise<Buffer> {
    return this.transport.bytes(this.request(name, args));
  }

  /** The request a call sends (path, query, body), for a caller that streams the answer itself. */
  request<N extends RouteName>(name: N, args?: CallArgs<N>): SdkRequest {
    const r: RouteDef = ROUTES[name];
    const a = (args ?? {}) as {
      params?: Record<string, string>;
      query?: Record<string, unknown>;
      body?: unknown;
      raw?: Buffer;
      accept?: string;
    };
    const accept =
      a.accept ??
      (r.produces === 'text/plain'
        ? 'text/plain'
        : r.produces === 'application/octet-stream'
          ? 'application/octet-stream'
          : 'application/json');
    return {
      method: r.method,
      path: routeUrl(r.path, a.params ?? {}, a.query),
      ...(a.body !== undefined ? { body: a.body } : {}),
      ...(a.raw !== undefined ? { raw: a.raw } : {}),
      accept,
      ...(r.auth === 'public' ? { anonymous: true } : {}),
    };
  }
}

/** Where the default transport sends requests, and as whom. */
export interface ClientOptions {
  /** The server, e.g. `http://127.0.0.1:7878` (ATELIER_URL). */
  url: string;
  /** An API token (`atelier tokens create`; ATELIER_TOKEN), or a function answering a fresh one. */
  token?: string | (() => string | undefined | Promise<string | undefined>);
  /** Sent as `x-atelier-tenant` (ATELIER_TENANT). */
  tenant?: string;
  /** Another fetch (a proxy, a test double of your own). */
  fetch?: typeof fetch;
}

/** The error a non-2xx answer carries (`{ code, message, details, requestId }`). */
export function errorFromAnswer(status: number, text: string): AtelierError {
  let body: { code?: unknown; message?: unknown; details?: Record<string, unknown>; requestId?: string } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // not JSON: keep the status
  }
  const code = isErrorCode(body.code) ? body.code : status === 401 ? 'UNAUTHENTICATED' : status === 503 ? 'UNAVAILABLE' : 'INTERNAL';
  const message = typeof body.message === 'string' ? body.message : `server answered ${status}`;
  return new AtelierError(code, message, { ...body.details, ...(body.requestId ? { requestId: body.requestId } : {}) });
}

/** A transport over `fetch`: a bearer token, JSON in and out, errors as AtelierError. */
export function fetchTransport(opts: ClientOptions): Transport {
  const doFetch = opts.fetch ?? fetch;
  const send = async (req: SdkRequest): Promise<Response> => {
    const headers: Record<string, string> = { accept: req.accept ?? 'application/json' };
    const token = req.anonymous ? undefined : typeof opts.token === 'function' ? await opts.token() : opts.token;
    if (token) headers.authorization = `Bearer ${token}`;
    if (opts.tenant) headers['x-atelier-tenant'] = opts.tenant;
    let payload: Buffer | string | undefined;
    if (req.raw) {
      headers['content-type'] = 'application/octet-stream';
      payload = req.raw;
    } else if (req.body !== undefined) {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(req.body);
    }
    let res: Response;
    try {
      res = await doFetch(new URL(req.path, opts.url), {
        method: req.method,
        headers,
        ...(payload !== undefined ? { body: payload } : {}),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code;
      throw new AtelierError('UNAVAILABLE', `cannot reach the Atelier server at ${opts.url}${cause ? ` (${cause})` : ''}: is it running?`);
    }
    if (!res.ok) throw errorFromAnswer(res.status, await res.text());
    return res;
  };
  return {
    async json(req) {
      const text = await (await send(req)).text();
      return text ? (JSON.parse(text) as unknown) : undefined;
    },
    async bytes(req) {
      return Buffer.from(await (await send(req)).arrayBuffer());
    },
  };
}

/** A client of the server at `opts.url` (see AtelierClient). */
export function createClient(opts: ClientOptions | Transport): AtelierClient {
  return new AtelierClient('json' in opts ? opts : fetchTransport(opts));
}
