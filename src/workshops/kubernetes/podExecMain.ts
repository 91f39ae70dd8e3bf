import { spawnSync } from 'node:child_process';
import { finished } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { readKubeconfig } from './client.js';
import { ENV_NAME, podExecStream, type PodExecStream } from './execStream.js';

/**
 * `node podExecMain.js --namespace NS --pod POD --container C [--tty] [--cwd DIR] -- COMMAND…`:
 * runs COMMAND in the pod through the API server with this program's stdio piped to it, as
 * `kubectl exec -i [-t]` does, so a caller that spawns an argv (a PTY through node-pty, an SSH
 * channel, an agent session's holder) can run it in a pod (`podExecEntry` builds the argv).
 *
 * Its environment, not its command line (which `ps` shows to every user of this host):
 * - `ATELIER_POD_KUBECONFIG`: the kubeconfig to connect with (server, CA, client certificate and
 *   key, or token), read with client.ts's `readKubeconfig`;
 * - `__ATELIER_ENV_<NAME>`: the command's environment (the same prefix as the local sandbox's
 *   handover, src/sandbox/launcher.ts), sent into the pod through the exec's stdin before the
 *   command's own (execStream.ts says how and why).
 *
 * With `--tty` and a terminal on its stdin, the terminal goes raw (keys reach the pod as typed),
 * the pod's terminal gets its size at the start and on every SIGWINCH.
 *
 * Exit status: the command's exit code; 125 when the exec itself failed (refused by the API
 * server, the connection lost, or a closing Status without an exit code), with the reason on
 * stderr; 128+N when this program got signal N (SIGHUP 129, SIGINT 130, SIGTERM 143): it then
 * closes the stream, which a kubelet takes as the end of the exec (with a TTY, the command gets
 * SIGHUP from its terminal; without one a kubelet does not kill it).
 */

/** The variable naming the kubeconfig this program connects with. */
export const POD_KUBECONFIG_ENV = 'ATELIER_POD_KUBECONFIG';
/** The prefix of the variables handed over as the command's environment. */
export const POD_ENV_PREFIX = '__ATELIER_ENV_';
/** The exec failed before or instead of the command's exit code. */
export const EXEC_FAILED = 125;
const SIGNALS: [NodeJS.Signals, number][] = [
  ['SIGHUP', 1],
  ['SIGINT', 2],
  ['SIGTERM', 15],
];

export interface PodExecTarget {
  /** The kubeconfig file the program reads (never on the command line). */
  kubeconfig: string;
  namespace: string;
  pod: string;
  container: string;
}

/** The argv and environment that run `command` in the pod with this program (spawn them yourself). */
export function podExecEntry(
  target: PodExecTarget,
  spec: { command: string[]; env?: Record<string, string>; cwd?: string; tty?: boolean },
): { argv: string[]; env: Record<string, string> } {
  const argv = [process.execPath, fileURLToPath(import.meta.url), '--namespace', target.namespace, '--pod', target.pod];
  argv.push('--container', target.container);
  if (spec.tty) argv.push('--tty');
  if (spec.cwd) argv.push('--cwd', spec.cwd);
  argv.push('--', ...spec.command);
  const env: Record<string, string> = { [POD_KUBECONFIG_ENV]: target.kubeconfig };
  for (const [k, v] of Object.entries(spec.env ?? {})) {
    if (!ENV_NAME.test(k)) throw new Error(`environment variable ${JSON.stringify(k)}: not a shell variable name, cannot be handed over`);
    env[`${POD_ENV_PREFIX}${k}`] = v;
  }
  return { argv, env };
}

interface Args {
  namespace: string;
  pod: string;
  container: string;
  tty: boolean;
  cwd?: string;
  command: string[];
}

function parseArgs(argv: string[]): Args {
  const out: Partial<Args> = { tty: false };
  let i = 0;
  for (; i < argv.length && argv[i] !== '--'; i++) {
    const a = argv[i]!;
    if (a === '--tty') out.tty = true;
    else if (a === '--namespace' || a === '--pod' || a === '--container' || a === '--cwd') {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      out[a.slice(2) as 'namespace' | 'pod' | 'container' | 'cwd'] = v;
    } else throw new Error(`unknown argument ${a}`);
  }
  const command = argv.slice(i + 1);
  if (!out.namespace || !out.pod || !out.container || command.length === 0) {
    throw new Error('usage: podExecMain --namespace NS --pod POD --container C [--tty] [--cwd DIR] -- COMMAND…');
  }
  return { ...(out as Args), command };
}

async function main(): Promise<number> {
  let args: Args;
  let kubeconfig: string | undefined;
  try {
    args = parseArgs(process.argv.slice(2));
    kubeconfig = process.env[POD_KUBECONFIG_ENV];
    if (!kubeconfig) throw new Error(`${POD_KUBECONFIG_ENV} is not set: it names the kubeconfig to connect with`);
  } catch (err) {
    process.stderr.write(`atelier pod exec: ${(err as Error).message}\n`);
    return 2;
  }
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (k.startsWith(POD_ENV_PREFIX) && v !== undefined) env[k.slice(POD_ENV_PREFIX.length)] = v;
  const terminal = args.tty && process.stdin.isTTY;
  let exec: PodExecStream;
  try {
    exec = await podExecStream(readKubeconfig(kubeconfig), { ...args, env });
  } catch (err) {
    process.stderr.write(`atelier pod exec: ${(err as Error).message}\n`);
    return EXEC_FAILED;
  }
  let signalled: number | undefined;
  for (const [name, n] of SIGNALS) {
    process.once(name, () => {
      signalled = 128 + n;
      exec.close();
    });
  }
  if (terminal) {
    process.stdin.setRawMode(true);
    // libuv's raw mode keeps output post-processing (ONLCR): the pod's terminal already turned
    // each \n into \r\n, and this one would add another \r. Off, as kubectl's raw mode has it;
    // setRawMode(false) at the end restores the terminal's settings as they were before.
    spawnSync('stty', ['-opost'], { stdio: ['inherit', 'ignore', 'ignore'] });
    const size = () => {
      const out = process.stdout.isTTY ? process.stdout : undefined;
      if (out) exec.resize(out.columns, out.rows);
    };
    size();
    process.stdout.on('resize', size);
    process.on('SIGWINCH', size);
  }
  process.stdin.pipe(exec.stdin);
  exec.stdout.pipe(process.stdout);
  exec.stderr.pipe(process.stderr);
  const exit = await exec.exit;
  if (terminal) process.stdin.setRawMode(false);
  process.stdin.unpipe(exec.stdin);
  process.stdin.destroy();
  // Everything the pod sent is written out before leaving (writes to pipes and terminals are synchronous on Linux once made).
  await Promise.all([finished(exec.stdout).catch(() => undefined), finished(exec.stderr).catch(() => undefined)]);
  if (signalled !== undefined) return signalled;
  if ('exitCode' in exit) return exit.exitCode;
  process.stderr.write(`atelier pod exec: ${exit.error}\n`);
  return EXEC_FAILED;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  void main().then((code) => process.exit(code));
}
