import { execFile, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { AtelierError } from '../core/index.js';
import { readProjectFile } from './projectFiles.js';
import { nativeArgv, pingStack, renderedPath, renderTemplate, stackStatus, startStack, stopStack, type StackId } from './stacks.js';
import type { ObservedEffect, Precondition, Project } from './types.js';
import { canonical, readYamlMapping } from './yamlEdit.js';

export type StackOperation = 'start' | 'stop' | 'restart' | 'recreate';
export const STACK_OPERATIONS: readonly StackOperation[] = ['start', 'stop', 'restart', 'recreate'];

/**
 * Where a project's stacks run. Two implementations behind this one interface: the native
 * backend (processes supervised by the server; the default) and the compose backend (`docker
 * compose` / `podman compose` on the rendered stack file). Every argv comes from the catalog id
 * and the rendered file, never from the client; none ever deletes a volume.
 */
export interface StackBackend {
  readonly kind: 'native' | 'docker' | 'podman';
  /** The exact argv an operation runs (shown in plans). */
  argv(project: Project, stack: StackId, op: StackOperation): string[];
  /** Whether an operation may reach the network (a compose `up` pulls a missing image): flagged in plans. */
  network(op: StackOperation): boolean;
  /** What this backend needs for a stack (the server binary, the engine). */
  preconditions(project: Project, stack: StackId): Precondition[];
  /** Running or not, read from the backend now. Throws UNAVAILABLE when the backend cannot tell. */
  running(project: Project, stack: StackId): boolean;
  /** Runs one operation and reports what it observed. */
  run(project: Project, stack: StackId, op: StackOperation): Promise<ObservedEffect[]>;
  /** The stack answers (a PING for redis). */
  probe(project: Project, stack: StackId): Promise<{ ok: boolean; detail: string }>;
  /** Every argv this backend can run for a stack, read-only probes included (criterion 2 checks them all). */
  everyArgv(project: Project, stack: StackId): string[][];
  /**
   * At server start: starts again the stacks that should run. The native backend's "machine" is
   * the server; an engine restarts `unless-stopped` containers itself, so the compose backend does nothing.
   */
  reconcile(project: Project, stack: StackId, policy: string): Promise<boolean>;
}

const SERVER_BINARY: Record<StackId, string> = { redis: 'redis-server' };

function installed(binary: string): boolean {
  return ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'].some((d) => existsSync(`${d}/${binary}`));
}

/** The native backend: redis-server as a process of its own, its data under DATA_DIR/stacks. */
export function nativeBackend(stacksDir: string): StackBackend {
  const argvOf = (project: Project, stack: StackId, op: StackOperation): string[] =>
    op === 'stop' ? ['kill', '-TERM', '(the stack process)'] : nativeArgv(stacksDir, project, stack);
  return {
    kind: 'native',
    argv: argvOf,
    network: () => false,
    preconditions(_project, stack) {
      const bin = SERVER_BINARY[stack];
      const ok = installed(bin);
      return [
        {
          name: `${bin} installed`,
          ok,
          reason: ok ? 'native backend: a process supervised by the server' : `plan extras.install-command with component=${bin}`,
        },
      ];
    },
    running: (project, stack) => stackStatus(stacksDir, project, stack).running,
    async run(project, stack, op) {
      const effects: ObservedEffect[] = [];
      if (op !== 'start') {
        await stopStack(stacksDir, project, stack);
        effects.push({ kind: 'service', stack, operation: 'stop', detail: op === 'stop' ? 'stopped; data kept' : op });
      }
      if (op !== 'stop') {
        const { pid } = await startStack(stacksDir, project, stack);
        effects.push({ kind: 'service', stack, operation: 'start', pid, detail: 'started' });
      }
      return effects;
    },
    async probe(project, stack) {
      const st = stackStatus(stacksDir, project, stack);
      const ok = st.running && (await pingStack(stacksDir, project, stack));
      return { ok, detail: st.running ? `pid ${st.pid}` : 'not running' };
    },
    everyArgv: (project, stack) => STACK_OPERATIONS.map((op) => argvOf(project, stack, op)),
    async reconcile(project, stack, policy) {
      const st = stackStatus(stacksDir, project, stack);
      if (st.running || st.desired !== 'running' || policy !== 'unless-stopped') return false;
      await startStack(stacksDir, project, stack);
      return true;
    },
  };
}

/** The command each stack's container answers when it is up. */
const PROBE: Record<StackId, { argv: string[]; expect: string }> = { redis: { argv: ['redis-cli', 'ping'], expect: 'PONG' } };

const OUTPUT_LIMIT = 1 << 20;

function tail(text: string): string {
  const t = text.trim();
  return t.length > 500 ? `…${t.slice(-500)}` : t;
}

/**
 * The compose project of a stack: `atelier-<project id>-<stack>`. The id, not the name: names
 * may hold dots (compose refuses them) and two tenants may use the same name.
 */
export function composeProject(project: Project, stack: StackId): string {
  return `atelier-${project.id}-${stack}`;
}

/**
 * The rendered file is the project's (a user can edit it), and an engine runs what it says as
 * root. The compose backend therefore runs it only while it is the kit's template with at most
 * the restart policy changed — what the catalog's actions write.
 */
export function renderedFromTemplate(project: Project, stack: StackId): { ok: boolean; reason: string } {
  const rel = renderedPath(stack);
  let text: string | null;
  try {
    text = readProjectFile(project.path, rel);
  } catch (err) {
    return { ok: false, reason: (err as Error).message };
  }
  if (text === null) return { ok: true, reason: `${rel} will be rendered from deploy/stacks/${stack}.tpl.yml` };
  const normal = (t: string): string | undefined => {
    try {
      const doc = readYamlMapping(t, rel) as { services?: Record<string, Record<string, unknown>> };
      const service = doc.services?.[stack];
      if (service) delete service.restart;
      return JSON.stringify(canonical(doc));
    } catch {
      return undefined;
    }
  };
  const ok = normal(text) !== undefined && normal(text) === normal(renderTemplate(stack, project));
  return {
    ok,
    reason: ok
      ? `${rel} is the kit's template (restart policy aside)`
      : `${rel} differs from deploy/stacks/${stack}.tpl.yml beyond its restart policy: the compose backend runs only the kit's template; move the file away to render it again`,
  };
}

/** The compose backend: `<engine> compose -f <rendered file> -p atelier-<project>-<stack> …`. */
export function composeBackend(engine: 'docker' | 'podman'): StackBackend {
  const base = (project: Project, stack: StackId): string[] => [
    engine,
    'compose',
    '-f',
    join(project.path, renderedPath(stack)),
    '-p',
    composeProject(project, stack),
  ];
  const argvOf = (project: Project, stack: StackId, op: StackOperation): string[] => {
    switch (op) {
      case 'start':
        return [...base(project, stack), 'up', '-d'];
      case 'stop':
        // Never `down`: a stop keeps the containers and their volumes.
        return [...base(project, stack), 'stop'];
      case 'restart':
        return [...base(project, stack), 'restart'];
      case 'recreate':
        // The same named volume is attached to the new container.
        return [...base(project, stack), 'up', '-d', '--force-recreate'];
    }
  };
  const psArgv = (project: Project, stack: StackId): string[] => [...base(project, stack), 'ps', '--all', '--format', 'json'];
  const probeArgv = (project: Project, stack: StackId): string[] => [...base(project, stack), 'exec', '-T', stack, ...PROBE[stack].argv];
  const runAsync = (argv: string[], timeoutMs: number): Promise<{ code: number; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      const [cmd, ...args] = argv;
      execFile(cmd!, args, { timeout: timeoutMs, maxBuffer: OUTPUT_LIMIT, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code as number) : -1) : 0;
        resolve({ code, stdout: String(stdout), stderr: err && code === -1 ? `${String(stderr)}\n${err.message}` : String(stderr) });
      });
    });

  return {
    kind: engine,
    argv: argvOf,
    // `up` pulls the image when the engine does not have it yet.
    network: (op) => op === 'start' || op === 'recreate',
    preconditions(project, stack) {
      const version = spawnSync(engine, ['compose', 'version', '--short'], { timeout: 10_000, encoding: 'utf8' });
      const ok = version.status === 0;
      const template = renderedFromTemplate(project, stack);
      return [
        {
          name: `${engine} compose answers`,
          ok,
          reason: ok
            ? `compose backend: ${engine} compose ${version.stdout.trim()}`
            : `\`${engine} compose version\` failed: ${tail(version.stderr || version.error?.message || '')}`,
        },
        { name: 'rendered file is the kit template', ok: template.ok, reason: template.reason },
      ];
    },
    running(project, stack) {
      if (readProjectFile(project.path, renderedPath(stack)) === null) return false;
      const argv = psArgv(project, stack);
      const r = spawnSync(argv[0]!, argv.slice(1), { timeout: 30_000, encoding: 'utf8', maxBuffer: OUTPUT_LIMIT });
      if (r.status !== 0)
        throw new AtelierError('UNAVAILABLE', `\`${argv.join(' ')}\` failed: ${tail(r.stderr || r.error?.message || '')}`, { stack });
      return containersOf(r.stdout).some((c) => c.Service === stack && c.State === 'running');
    },
    async run(project, stack, op) {
      if (op !== 'stop') {
        const t = renderedFromTemplate(project, stack);
        if (!t.ok) throw new AtelierError('PRECONDITION_FAILED', t.reason, { path: renderedPath(stack) });
      }
      const argv = argvOf(project, stack, op);
      // An image pull may take minutes; a stop lets the service flush (compose's own 10 s, then SIGKILL).
      const r = await runAsync(argv, op === 'stop' ? 60_000 : 600_000);
      if (r.code !== 0)
        throw new AtelierError('UNAVAILABLE', `\`${argv.join(' ')}\` failed (exit ${r.code}): ${tail(r.stderr)}`, { stack, argv });
      return [{ kind: 'service', stack, operation: op, detail: `ran: ${argv.join(' ')}` }];
    },
    async probe(project, stack) {
      const argv = probeArgv(project, stack);
      const deadline = Date.now() + 15_000;
      let last = '';
      // A container that just started may need a moment before it answers.
      for (;;) {
        const r = await runAsync(argv, 10_000);
        if (r.code === 0 && r.stdout.trim() === PROBE[stack].expect)
          return { ok: true, detail: `${PROBE[stack].argv.join(' ')}: ${r.stdout.trim()}` };
        last = tail(r.stderr || r.stdout);
        if (Date.now() > deadline) return { ok: false, detail: `${PROBE[stack].argv.join(' ')}: ${last || `exit ${r.code}`}` };
        await new Promise((res) => setTimeout(res, 200));
      }
    },
    everyArgv: (project, stack) => [
      [engine, 'compose', 'version', '--short'],
      ...STACK_OPERATIONS.map((op) => argvOf(project, stack, op)),
      psArgv(project, stack),
      probeArgv(project, stack),
    ],
    reconcile: async () => false,
  };
}

/** `docker compose ps --format json` prints one array (Compose < 2.21) or one object per line (later). */
export function containersOf(stdout: string): { Service?: string; State?: string; Name?: string }[] {
  const text = stdout.trim();
  if (text === '') return [];
  try {
    const whole = JSON.parse(text) as unknown;
    return (Array.isArray(whole) ? whole : [whole]) as { Service?: string; State?: string }[];
  } catch {
    return text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l) as { Service?: string; State?: string });
  }
}

export type StackBackendSetting = 'native' | 'auto' | 'compose' | 'docker' | 'podman';

function composeWorks(engine: 'docker' | 'podman'): boolean {
  return spawnSync(engine, ['compose', 'version', '--short'], { timeout: 10_000, stdio: 'ignore' }).status === 0;
}

/**
 * The backend the server uses (ATELIER_STACKS_BACKEND): `native` (the default), `docker` or
 * `podman` (that engine, which must answer `compose version`), `compose` (the first of docker,
 * podman that answers; an error when none does) or `auto` (the first that answers, else native).
 */
export function selectStackBackend(setting: StackBackendSetting, stacksDir: string): StackBackend {
  if (setting === 'native') return nativeBackend(stacksDir);
  const candidates: ('docker' | 'podman')[] = setting === 'docker' || setting === 'podman' ? [setting] : ['docker', 'podman'];
  const engine = candidates.find(composeWorks);
  if (engine) return composeBackend(engine);
  if (setting === 'auto') return nativeBackend(stacksDir);
  throw new AtelierError(
    'INVALID_ARGUMENT',
    `ATELIER_STACKS_BACKEND=${setting}, but ${candidates.map((c) => `\`${c} compose version\``).join(' and ')} failed: install the engine and its compose plugin, or set ATELIER_STACKS_BACKEND=native`,
    { field: 'ATELIER_STACKS_BACKEND' },
  );
}
