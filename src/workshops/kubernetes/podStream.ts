import WebSocket from 'ws';
import { KubeApiError, KubeClient, type KubeConnection, type KubeObject } from './client.js';

/**
 * Opens a pod's streaming subresource (`exec`, `portforward`) as a WebSocket through the API
 * server, authenticated as the kubeconfig says, and turns a refusal into a message that says what
 * is wrong: the API server answers a refused upgrade with a plain HTTP status and a `Status` body.
 * The pod is read first, as kubectl does: the API server hands an exec or a port-forward to the
 * node whatever the pod's phase, and a completed pod's kubelet answers with a runtime error that
 * names no phase; a pod that is not Running is refused here, saying which phase it is in.
 */

/** What a streaming subresource answered when it refused the upgrade. */
export class PodStreamError extends Error {
  constructor(
    /** The HTTP status (0: no answer, the connection failed). */
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'PodStreamError';
  }
}

export async function openPodStream(
  connection: KubeConnection,
  namespace: string,
  pod: string,
  subresource: 'exec' | 'portforward',
  query: [string, string][],
  protocols: string[],
): Promise<WebSocket> {
  await assertRunning(connection, namespace, pod, subresource);
  const { server, ca, cert, key, token } = connection;
  const url = new URL(`/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(pod)}/${subresource}`, server);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const [k, v] of query) url.searchParams.append(k, v);
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  // Frames of 1 MiB at most from the pod: more is a broken peer, not a stream.
  const ws = new WebSocket(url, protocols, { ca, cert, key, headers, maxPayload: 1 << 20 });
  const what = `pods/${subresource} ${namespace}/${pod}`;
  return new Promise((resolve, reject) => {
    ws.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        reject(new PodStreamError(status, `${what}: ${refusal(status, Buffer.concat(chunks).toString('utf8'), namespace, subresource)}`));
        ws.terminate();
      });
    });
    ws.on('error', (err) => reject(new PodStreamError(0, `${what}: ${err.message}`)));
    ws.once('open', () => {
      ws.removeAllListeners('error');
      resolve(ws);
    });
  });
}

async function assertRunning(connection: KubeConnection, namespace: string, pod: string, subresource: string): Promise<void> {
  const what = `pods/${subresource} ${namespace}/${pod}`;
  const client = new KubeClient(connection);
  let phase: string | undefined;
  try {
    const p = await client.request<KubeObject & { status?: { phase?: string } }>(
      'GET',
      `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(pod)}`,
    );
    phase = p.status?.phase;
  } catch (err) {
    if (!(err instanceof KubeApiError)) throw err;
    const text = JSON.stringify({ message: err.message.replace(/^GET \S+: \d+ \S+: /, '') });
    const reason =
      err.status === 403
        ? refusal(403, text, namespace, subresource).replace(/`create` on pods\/\w+/, '`get` on pods')
        : refusal(err.status, text, namespace, subresource);
    throw new PodStreamError(err.status, `${what}: ${reason}`);
  } finally {
    client.close();
  }
  if (phase === 'Succeeded' || phase === 'Failed') {
    throw new PodStreamError(400, `${what}: the pod has completed (phase ${phase}): nothing runs in it any more; start the workshop again`);
  }
  if (phase !== 'Running')
    throw new PodStreamError(400, `${what}: the pod is not running yet (phase ${phase ?? 'unknown'}): wait until the workshop is Running`);
}

/** The API server's reason, and what to do about it. */
function refusal(status: number, body: string, namespace: string, subresource: string): string {
  let message = body.trim().slice(0, 500);
  try {
    message = (JSON.parse(body) as { message?: string }).message ?? message;
  } catch {
    // not a Status: keep the text
  }
  switch (status) {
    case 401:
      return `401 Unauthorized: the API server did not accept the kubeconfig's credentials (an expired token, a client certificate from another CA): ${message}`;
    case 403:
      return `403 Forbidden: ${message} (the kubeconfig's identity needs \`create\` on pods/${subresource} in namespace ${namespace})`;
    case 404:
      return `404 Not Found: ${message} (no such pod: the workshop is gone, or not started yet)`;
    case 400:
      // The API server's own words name the cause: a pod not bound to a node yet, a completed pod
      // ("cannot exec into a container in a completed pod"), an unknown container.
      return `400 Bad Request: ${message}`;
    default:
      return `${status}: ${message}`;
  }
}
