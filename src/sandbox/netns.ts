import { spawn } from 'node:child_process';
import type { Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { pythonLibEnv } from '../core/index.js';
import { nsenterArgs, type SandboxHandle } from './launcher.js';
import { seccompWrapOnHost } from './seccomp.js';

const HELPER = fileURLToPath(new URL('./netns-listen.py', import.meta.url));

/** An address and port to listen on inside a workshop (an IPv4 loopback address). */
export interface SandboxPort {
  address: string;
  port: number;
}

/**
 * TCP listeners on `127.0.0.1:port` (or the address given) INSIDE the sandbox's network
 * namespace, owned by this process: a short-lived helper (netns-listen.py) enters the
 * namespace (nsenter), listens, and passes the sockets back over Node's IPC channel.
 * Connections from inside the workshop then reach the server directly: no forwarder process
 * in the sandbox, no extra copy. The workshop cannot reach anything else: its namespace still
 * has loopback only. One helper opens all the listeners asked for at once.
 */
export function listenInSandboxMany(handle: SandboxHandle, ports: readonly SandboxPort[], timeoutMs = 10_000): Promise<Server[]> {
  if (ports.length === 0) return Promise.resolve([]);
  const child = spawn(
    '/usr/bin/nsenter',
    [
      ...nsenterArgs(handle, ['-n']),
      '--',
      ...seccompWrapOnHost(['/usr/bin/python3', '-I', '-S', HELPER, ...ports.map((p) => `${p.address}:${p.port}`)]),
    ],
    { stdio: ['ignore', 'ignore', 'pipe', 'ipc'], env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8', ...pythonLibEnv() } },
  );
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-2000)));
  const servers: Server[] = [];
  const what = ports.map((p) => `${p.address}:${p.port}`).join(', ');
  return new Promise<Server[]>((resolve, reject) => {
    const fail = (err: Error): void => {
      clearTimeout(timer);
      for (const s of servers) s.close();
      reject(err);
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`the listeners ${what} did not open within ${timeoutMs} ms in workshop pid ${handle.pid}`));
    }, timeoutMs);
    child.on('message', (m: unknown, server?: Server) => {
      if (typeof m !== 'string' || !m.startsWith('listening') || !server) {
        fail(new Error(`a listener could not open in the workshop: ${(m as { error?: string })?.error ?? 'no socket'}`));
        return;
      }
      servers.push(server);
      if (servers.length === ports.length) {
        clearTimeout(timer);
        resolve(servers);
      }
    });
    child.on('exit', (code) => {
      if (servers.length === ports.length) return;
      fail(
        new Error(`the listener helper for ${what} exited (${code}) before handing its sockets over${stderr ? `: ${stderr.trim()}` : ''}`),
      );
    });
    child.on('error', fail);
  });
}

/** One listener on 127.0.0.1:`port` inside the sandbox (the egress proxy's). */
export async function listenInSandbox(handle: SandboxHandle, port: number, timeoutMs = 10_000): Promise<Server> {
  const [server] = await listenInSandboxMany(handle, [{ address: '127.0.0.1', port }], timeoutMs);
  return server!;
}

/** Why a connection to a port inside the workshop failed: the errno name (ECONNREFUSED, ETIMEDOUT…). */
export class SandboxConnectError extends Error {
  constructor(
    readonly errno: string,
    message: string,
  ) {
    super(message);
  }
}
