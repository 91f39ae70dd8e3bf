import http from 'node:http';
import https from 'node:https';
import { AtelierError, isErrorCode, readClientConfig, readToken, type Config } from '../core/index.js';

/** Where the CLI talks to, resolved from --context, ATELIER_CONTEXT, ATELIER_URL/TOKEN or config.yaml. */
export interface Target {
  context: string;
  url: string;
  token: string | undefined;
}

export async function resolveTarget(config: Config, contextFlag: string | undefined): Promise<Target> {
  if (config.url && !contextFlag) return { context: '(ATELIER_URL)', url: config.url, token: config.token };
  const cc = await readClientConfig(config.configDir);
  const name = contextFlag ?? config.context ?? cc.currentContext;
  if (!name) {
    throw new AtelierError(
      'UNAUTHENTICATED',
      `no Atelier context is configured in ${config.configDir}: start a server on this machine with \`atelier server start\`, or set ATELIER_URL and ATELIER_TOKEN`,
    );
  }
  const ctx = cc.contexts.find((c) => c.name === name);
  if (!ctx)
    throw new AtelierError(
      'NOT_FOUND',
      `context "${name}" does not exist: known contexts are ${cc.contexts.map((c) => c.name).join(', ') || '(none)'}`,
    );
  return { context: name, url: ctx.url, token: config.token ?? readToken(config.configDir, name) };
}

export interface RequestOptions {
  method: string;
  path: string;
  body?: unknown;
  raw?: Buffer;
  accept?: string;
}

/** One HTTP request to the server; returns the response for streaming callers. */
export function request(target: Target, opts: RequestOptions): Promise<http.IncomingMessage> {
  const url = new URL(opts.path, target.url);
  const lib = url.protocol === 'https:' ? https : http;
  const payload = opts.raw ?? (opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body)));
  const headers: Record<string, string> = { accept: opts.accept ?? 'application/json' };
  if (target.token) headers.authorization = `Bearer ${target.token}`;
  if (payload) {
    headers['content-type'] = opts.raw ? 'application/octet-stream' : 'application/json';
    headers['content-length'] = String(payload.length);
  }
  return new Promise((resolve, reject) => {
    const req = lib.request(url, { method: opts.method, headers }, resolve);
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNREFUSED' || err.code === 'ENOTFOUND' || err.code === 'EHOSTUNREACH') {
        reject(
          new AtelierError(
            'UNAVAILABLE',
            `cannot reach the Atelier server at ${target.url} (context ${target.context}): is it running? Start it with \`atelier server start\``,
          ),
        );
      } else reject(new AtelierError('UNAVAILABLE', `request to ${target.url} failed: ${err.message}`));
    });
    req.end(payload);
  });
}

export async function readBody(res: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Turns a non-2xx response into the server's AtelierError (code, message, details). */
export async function raiseFor(res: http.IncomingMessage): Promise<void> {
  if ((res.statusCode ?? 500) < 400) return;
  const text = (await readBody(res)).toString('utf8');
  let body: { code?: unknown; message?: unknown; details?: Record<string, unknown>; requestId?: string } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // not JSON: keep the status
  }
  const code = isErrorCode(body.code) ? body.code : res.statusCode === 503 ? 'UNAVAILABLE' : 'INTERNAL';
  const message = typeof body.message === 'string' ? body.message : `server answered ${res.statusCode}`;
  throw new AtelierError(code, message, { ...body.details, ...(body.requestId ? { requestId: body.requestId } : {}) });
}

/** JSON request → parsed JSON response. */
export async function call<T>(target: Target, opts: RequestOptions): Promise<T> {
  const res = await request(target, opts);
  await raiseFor(res);
  const text = (await readBody(res)).toString('utf8');
  return (text ? JSON.parse(text) : undefined) as T;
}
