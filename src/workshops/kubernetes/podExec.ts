import WebSocket from 'ws';
import type { KubeClient } from './client.js';

/**
 * Runs a command in a pod's container through the API server's `pods/exec` subresource over a
 * WebSocket (the `v5.channel.k8s.io` protocol: each binary message starts with its channel, 1
 * stdout, 2 stderr, 3 the closing Status). One-shot, no stdin, no TTY: execStream.ts streams
 * (stdin, TTY, resize, the environment handed over) and podExecMain.ts runs it as a program.
 */

export interface PodExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

interface ExecStatus {
  status?: string;
  message?: string;
  reason?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}

/** Runs `argv` in `container` of pod `namespace/pod`; resolves with its exit code and output. */
export function podExec(client: KubeClient, namespace: string, pod: string, container: string, argv: string[]): Promise<PodExecResult> {
  const { server, ca, cert, key, token } = client.connection;
  const url = new URL(`/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(pod)}/exec`, server);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  for (const arg of argv) url.searchParams.append('command', arg);
  url.searchParams.set('container', container);
  url.searchParams.set('stdout', 'true');
  url.searchParams.set('stderr', 'true');
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const ws = new WebSocket(url, ['v5.channel.k8s.io', 'v4.channel.k8s.io'], { ca, cert, key, headers });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let status: ExecStatus | undefined;
  return new Promise((resolve, reject) => {
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        reject(new Error(`pods/exec ${namespace}/${pod}: ${res.statusCode}: ${Buffer.concat(chunks).toString('utf8').slice(0, 500)}`)),
      );
    });
    ws.on('error', reject);
    ws.on('message', (data: Buffer) => {
      const channel = data[0];
      const body = data.subarray(1);
      if (channel === 1) out.push(body);
      else if (channel === 2) err.push(body);
      else if (channel === 3 && body.length > 0) status = JSON.parse(body.toString('utf8')) as ExecStatus;
    });
    ws.on('close', () => {
      const stdout = Buffer.concat(out).toString('utf8');
      const stderr = Buffer.concat(err).toString('utf8');
      if (!status) return reject(new Error(`pods/exec ${namespace}/${pod}: the stream closed without an exit status`));
      if (status.status === 'Success') return resolve({ exitCode: 0, stdout, stderr });
      const code = status.details?.causes?.find((c) => c.reason === 'ExitCode')?.message;
      if (status.reason === 'NonZeroExitCode' && code !== undefined) return resolve({ exitCode: Number(code), stdout, stderr });
      reject(new Error(`pods/exec ${namespace}/${pod}: ${status.message ?? status.reason ?? 'failed'}`));
    });
  });
}
