import { readFileSync } from 'node:fs';
import { Agent, request as httpsRequest } from 'node:https';
import { dirname, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse } from 'yaml';

/**
 * A Kubernetes API client over node:https: the driver needs a handful of verbs on a few resources,
 * a watch and client-certificate or token authentication, so it speaks the REST API directly
 * rather than carry a general client (docs/kubernetes.md says why).
 */

/** Where the API server is and how to authenticate to it (from a kubeconfig). */
export interface KubeConnection {
  server: URL;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  token?: string;
}

/** A `Status` answer of the API server (or a transport failure, status 0). */
export class KubeApiError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = 'KubeApiError';
  }
}

interface NamedEntry<T> {
  name: string;
  [key: string]: unknown;
  cluster?: T;
  user?: T;
  context?: T;
}

/** Reads a kubeconfig (its current context, or `context`): server, CA and client credentials, inline or as files beside it. */
export function readKubeconfig(path: string, context?: string): KubeConnection {
  const doc = parse(readFileSync(path, 'utf8')) as {
    'current-context'?: string;
    contexts?: NamedEntry<{ cluster: string; user: string }>[];
    clusters?: NamedEntry<Record<string, string>>[];
    users?: NamedEntry<Record<string, string>>[];
  };
  const name = context ?? doc['current-context'];
  const ctx = doc.contexts?.find((c) => c.name === name)?.context;
  if (!ctx) throw new Error(`kubeconfig ${path}: no context ${name ?? '(current-context is unset)'}`);
  const cluster = doc.clusters?.find((c) => c.name === ctx.cluster)?.cluster;
  const user = doc.users?.find((u) => u.name === ctx.user)?.user ?? {};
  if (!cluster?.server) throw new Error(`kubeconfig ${path}: cluster ${ctx.cluster} has no server`);
  const base = dirname(path);
  const material = (data: string | undefined, file: string | undefined): Buffer | undefined =>
    data ? Buffer.from(data, 'base64') : file ? readFileSync(resolve(base, file)) : undefined;
  return {
    server: new URL(cluster.server),
    ca: material(cluster['certificate-authority-data'], cluster['certificate-authority']),
    cert: material(user['client-certificate-data'], user['client-certificate']),
    key: material(user['client-key-data'], user['client-key']),
    token: user.token,
  };
}

/** One event of a watch. */
export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { apiVersion: string; kind: string; name: string; uid: string; controller?: boolean }[];
    deletionTimestamp?: string;
    [key: string]: unknown;
  };
  [key: string]: unknown;
}

export interface RequestOptions {
  /** For PATCH: `application/merge-patch+json` (default) or `application/json-patch+json`. */
  contentType?: string;
  query?: Record<string, string>;
}

export class KubeClient {
  private readonly agent: Agent;

  constructor(readonly connection: KubeConnection) {
    this.agent = new Agent({ ca: connection.ca, cert: connection.cert, key: connection.key, keepAlive: true });
  }

  /** Sends one request; resolves with the parsed body, rejects with KubeApiError for any answer but 2xx. */
  async request<T = KubeObject>(method: string, path: string, body?: unknown, options: RequestOptions = {}): Promise<T> {
    const res = await this.send(method, path, body, options);
    const text = await readAll(res.stream);
    if (res.status < 200 || res.status >= 300) throw apiError(res.status, text, method, path);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /**
   * Watches `path` from `resourceVersion` and calls `onEvent` for each event until the server ends
   * the stream (after `timeoutSeconds`, or when it goes away) or `signal` aborts; resolves with the last resourceVersion seen (the caller resumes
   * from it). A 410 Gone (the version was compacted) rejects with KubeApiError status 410: relist.
   */
  async watch<T extends KubeObject>(
    path: string,
    resourceVersion: string,
    onEvent: (event: WatchEvent<T>) => void,
    signal?: AbortSignal,
    timeoutSeconds = 300,
  ): Promise<string> {
    const query = { watch: '1', allowWatchBookmarks: 'true', resourceVersion, timeoutSeconds: String(timeoutSeconds) };
    const res = await this.send('GET', path, undefined, { query }, signal);
    if (res.status !== 200) throw apiError(res.status, await readAll(res.stream), 'WATCH', path);
    let last = resourceVersion;
    let buffered = '';
    try {
      for await (const chunk of res.stream) {
        buffered += (chunk as Buffer).toString('utf8');
        let nl: number;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (!line) continue;
          const event = JSON.parse(line) as WatchEvent<T>;
          if (event.type === 'ERROR') {
            const status = event.object as unknown as { code?: number; reason?: string; message?: string };
            throw new KubeApiError(status.code ?? 500, status.reason ?? 'Unknown', status.message ?? 'watch error');
          }
          if (event.object.metadata.resourceVersion) last = event.object.metadata.resourceVersion;
          onEvent(event);
        }
      }
    } catch (err) {
      if (signal?.aborted) return last;
      if (err instanceof KubeApiError || err instanceof SyntaxError) throw err;
      throw new KubeApiError(0, 'Transport', `WATCH ${path}: ${(err as Error).message}`);
    }
    return last;
  }

  /**
   * Lists `path`, then watches it from the list's resourceVersion until `signal` aborts. A watch
   * the server ends (`timeoutSeconds`), or that loses its connection, or an API server answering
   * 429 ("storage is (re)initializing") or 5xx while it restarts, is resumed from the last
   * resourceVersion seen, after `retryMs`; only 410 Gone (the version was compacted, or an API
   * server that restarted has rebuilt its watch cache past it) lists again. Any other error
   * rejects. `on.list` gets each list's items (the whole state: replace what you hold),
   * `on.event` each change after it; `stats` counts the lists and the resumes.
   */
  async listAndWatch<T extends KubeObject>(
    path: string,
    on: { list: (items: T[]) => void; event: (obj: T, deleted: boolean) => void },
    signal: AbortSignal,
    options: { timeoutSeconds?: number; retryMs?: number; stats?: { lists: number; resumes: number } } = {},
  ): Promise<void> {
    let rv: string | undefined;
    while (!signal.aborted) {
      try {
        if (rv === undefined) {
          const list = await this.request<{ metadata: { resourceVersion: string }; items: T[] }>('GET', path);
          if (options.stats) options.stats.lists++;
          on.list(list.items);
          rv = list.metadata.resourceVersion;
        } else if (options.stats) options.stats.resumes++;
        rv = await this.watch<T>(
          path,
          rv,
          (event) => {
            if (event.type !== 'BOOKMARK') on.event(event.object, event.type === 'DELETED');
          },
          signal,
          options.timeoutSeconds,
        );
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof KubeApiError && err.status === 410) rv = undefined;
        else if (!(err instanceof KubeApiError && (err.status === 0 || err.status === 429 || err.status >= 500))) throw err;
        await sleep(options.retryMs ?? 500, undefined, { signal }).catch(() => undefined);
      }
    }
  }

  /** Closes the client's kept-alive connections. */
  close(): void {
    this.agent.destroy();
  }

  private send(
    method: string,
    path: string,
    body: unknown,
    options: RequestOptions,
    signal?: AbortSignal,
  ): Promise<{ status: number; stream: NodeJS.ReadableStream }> {
    const url = new URL(path, this.connection.server);
    for (const [k, v] of Object.entries(options.query ?? {})) url.searchParams.set(k, v);
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = { accept: 'application/json' };
    if (payload) {
      headers['content-type'] = method === 'PATCH' ? (options.contentType ?? 'application/merge-patch+json') : 'application/json';
      headers['content-length'] = String(payload.length);
    }
    if (this.connection.token) headers.authorization = `Bearer ${this.connection.token}`;
    return new Promise((resolvePromise, reject) => {
      const req = httpsRequest(url, { method, headers, agent: this.agent, signal }, (res) =>
        resolvePromise({ status: res.statusCode ?? 0, stream: res }),
      );
      req.on('error', (err) => reject(new KubeApiError(0, 'Transport', `${method} ${url.pathname}: ${err.message}`)));
      req.end(payload);
    });
  }
}

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function apiError(status: number, text: string, method: string, path: string): KubeApiError {
  let reason = 'Unknown';
  let message = text.slice(0, 500);
  try {
    const s = JSON.parse(text) as { reason?: string; message?: string };
    reason = s.reason ?? reason;
    message = s.message ?? message;
  } catch {
    // not a Status object: keep the text
  }
  return new KubeApiError(status, reason, `${method} ${path}: ${status} ${reason}: ${message}`);
}
