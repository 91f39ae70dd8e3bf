import { finished } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { readKubeconfig } from './client.js';
import { podPortForward } from './portForward.js';
import { POD_KUBECONFIG_ENV } from './podExecMain.js';

/**
 * `node portForwardMain.js --namespace NS --pod POD --port N`: this program's stdin and stdout
 * are one TCP connection to port N in the pod, through the API server's `pods/portforward`
 * (portForward.ts), as a tunnel helper or `port-forward --stdio` uses it (an SSH ProxyCommand).
 * The kubeconfig comes from `ATELIER_POD_KUBECONFIG` in its environment, not its command line.
 *
 * Exit status: 0 when the connection ended (either side closed it; stdin's end closes it: the
 * protocol has no half-close); 1 when the API server refused, the pod's side could not be
 * reached (the kubelet's reason on stderr) or the connection broke; 2 for bad arguments.
 */

export function portForwardEntry(
  target: { kubeconfig: string; namespace: string; pod: string },
  port: number,
): { argv: string[]; env: Record<string, string> } {
  return {
    argv: [process.execPath, fileURLToPath(import.meta.url), '--namespace', target.namespace, '--pod', target.pod, '--port', String(port)],
    env: { [POD_KUBECONFIG_ENV]: target.kubeconfig },
  };
}

async function main(): Promise<number> {
  const args = new Map<string, string>();
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) args.set(argv[i]!, argv[i + 1] ?? '');
  const namespace = args.get('--namespace');
  const pod = args.get('--pod');
  const port = Number(args.get('--port'));
  const kubeconfig = process.env[POD_KUBECONFIG_ENV];
  if (!namespace || !pod || !args.get('--port') || [...args.keys()].some((k) => !['--namespace', '--pod', '--port'].includes(k))) {
    process.stderr.write('usage: portForwardMain --namespace NS --pod POD --port N\n');
    return 2;
  }
  if (!kubeconfig) {
    process.stderr.write(`atelier port-forward: ${POD_KUBECONFIG_ENV} is not set: it names the kubeconfig to connect with\n`);
    return 2;
  }
  try {
    const conn = await podPortForward(readKubeconfig(kubeconfig), namespace, pod, port);
    for (const sig of ['SIGHUP', 'SIGINT', 'SIGTERM'] as const) process.once(sig, () => conn.destroy());
    process.stdin.pipe(conn);
    conn.pipe(process.stdout);
    await finished(conn, { writable: false });
    return 0;
  } catch (err) {
    process.stderr.write(`atelier port-forward: ${(err as Error).message}\n`);
    return 1;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  void main().then((code) => process.exit(code));
}
