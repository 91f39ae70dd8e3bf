import { spawn } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { emitter } from './host/engine.js';

/**
 * `atelier server install --kubernetes`: the chart shipped with this release (deploy/helm/atelier)
 * installed or upgraded with the user's own `helm` on the cluster of the current kubeconfig context.
 * Helm does the applying and keeps the release's history (`helm history`, `helm rollback`); this
 * command finds the chart, checks what can be checked before helm runs, tells a change from none,
 * and turns helm's errors into what to do next.
 */

export interface KubernetesInstallFlags {
  kubeconfig?: string;
  kubeContext?: string;
  namespace?: string;
  releaseName?: string;
  values?: string[];
  set?: string[];
  plan?: boolean;
}

const DEFAULT_NAMESPACE = 'atelier';
const DEFAULT_RELEASE = 'atelier';

/** The chart beside this program: the release tarball's deploy/helm/atelier, or the checkout's. */
export function shippedChart(): string {
  // From dist/cli/commands/server/ (tsc's output) or dist/bundle/ (the CLI bundle): the first
  // folder above that holds the chart.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    const chart = join(dir, 'deploy', 'helm', 'atelier');
    if (existsSync(join(chart, 'Chart.yaml'))) return chart;
    dir = dirname(dir);
  }
  throw new Error('the Helm chart deploy/helm/atelier is not beside this `atelier`: reinstall the release, which ships it');
}

/** `helm` on PATH, or an error saying how to get it. */
function findHelm(): string {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const path = join(dir, 'helm');
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // not here
    }
  }
  throw new Error(
    '`helm` is not on PATH: `atelier server install --kubernetes` installs the chart with Helm 3.13 or newer; install it (https://helm.sh/docs/intro/install/, e.g. `curl -fsSL https://raw.githubusercontent.com/helm/helm/main/scripts/get-helm-3 | bash`) and run this again',
  );
}

/**
 * The kubeconfig files helm will read (--kubeconfig, else $KUBECONFIG's list, else ~/.kube/config),
 * checked here so that a missing file or an unknown context is said plainly, before helm falls
 * back to localhost:8080 or prints a Go error.
 */
function checkKubeconfig(flags: KubernetesInstallFlags): void {
  const inCluster = process.env.KUBERNETES_SERVICE_HOST !== undefined;
  let files: string[];
  if (flags.kubeconfig !== undefined) {
    if (!existsSync(flags.kubeconfig))
      throw new Error(`--kubeconfig ${flags.kubeconfig}: no such file: give the path of your cluster's kubeconfig`);
    files = [resolve(flags.kubeconfig)];
  } else if (process.env.KUBECONFIG) {
    files = process.env.KUBECONFIG.split(delimiter).filter((f) => f && existsSync(f));
    if (files.length === 0)
      throw new Error(
        `KUBECONFIG names no file that exists (${process.env.KUBECONFIG}): point it (or --kubeconfig) at your cluster's kubeconfig`,
      );
  } else {
    const home = join(homedir(), '.kube', 'config');
    if (!existsSync(home)) {
      if (inCluster && flags.kubeContext === undefined) return;
      throw new Error(
        `no kubeconfig: ${home} does not exist and neither KUBECONFIG nor --kubeconfig is set; get your cluster's kubeconfig (e.g. \`gcloud container clusters get-credentials\`, \`aws eks update-kubeconfig\`, \`kind get kubeconfig\`) and run this again`,
      );
    }
    files = [home];
  }
  const contexts = new Set<string>();
  let current: string | undefined;
  for (const file of files) {
    let doc: { 'current-context'?: unknown; contexts?: { name?: unknown }[] } | null;
    try {
      doc = parse(readFileSync(file, 'utf8')) as typeof doc;
    } catch (err) {
      throw new Error(`kubeconfig ${file} is not YAML (${(err as Error).message.split('\n')[0]}): give a kubeconfig file`);
    }
    for (const c of doc?.contexts ?? []) if (typeof c.name === 'string') contexts.add(c.name);
    // As kubectl merges a list: the first file that sets current-context wins.
    if (current === undefined && typeof doc?.['current-context'] === 'string' && doc['current-context'] !== '')
      current = doc['current-context'];
  }
  const known = contexts.size > 0 ? [...contexts].sort().join(', ') : 'none';
  const where = files.join(delimiter);
  if (flags.kubeContext !== undefined) {
    if (!contexts.has(flags.kubeContext))
      throw new Error(`kubeconfig ${where} has no context "${flags.kubeContext}" (it has: ${known}): give one of them with --kube-context`);
    return;
  }
  if (current === undefined)
    throw new Error(`kubeconfig ${where} sets no current-context: give one with --kube-context (it has: ${known})`);
  if (!contexts.has(current))
    throw new Error(
      `kubeconfig ${where}: its current-context "${current}" is not one of its contexts (${known}): give one with --kube-context`,
    );
}

interface HelmRun {
  code: number;
  stdout: string;
  stderr: string;
}

function runHelm(helm: string, args: string[]): Promise<HelmRun> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(helm, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolveRun({ code: code ?? -1, stdout, stderr }));
  });
}

/** What helm's failure means for the user, without Go's wrapping; the chart's own `fail` messages as written. */
export function helmError(r: HelmRun, ctx: { namespace: string; kubeContext?: string }): Error {
  const text = (r.stderr || r.stdout).trim();
  // The chart's `fail` (prerequisites, required values): "execution error at (atelier/templates/x.yaml:2:4): \n\nMESSAGE".
  const chartFail = /execution error at \([^)]*\):\s*([\s\S]*)$/.exec(text);
  if (chartFail) return new Error(`the chart refused to render: ${chartFail[1]!.trim()}`);
  // Helm before 3.13 has a boolean --dry-run.
  if (/invalid argument "server" for "--dry-run"/.test(text))
    return new Error(
      'this `helm` is older than 3.13 (it has no `--dry-run=server`): install a newer one (https://helm.sh/docs/intro/install/)',
    );
  if (/values don't meet the specifications of the schema/.test(text))
    return new Error(`the values do not fit the chart's schema (deploy/helm/atelier/values.schema.json):\n${text.replace(/^Error: /, '')}`);
  if (/Kubernetes cluster unreachable|connection refused|no such host|i\/o timeout|dial tcp/.test(text))
    return new Error(
      `the Kubernetes API server${ctx.kubeContext ? ` of context "${ctx.kubeContext}"` : ''} does not answer (${lastLine(text)}): check that the cluster is up and that your kubeconfig's context is the one you mean (\`kubectl config current-context\`, --kube-context)`,
    );
  if (/namespaces? "[^"]+" not found/.test(text))
    return new Error(
      `namespace ${ctx.namespace} does not exist: create it and the chart's Secrets first (\`kubectl create namespace ${ctx.namespace}\`; docs/kubernetes.md, "Installing with Helm")`,
    );
  if (/forbidden|Unauthorized|unauthorized/.test(text))
    return new Error(
      `the cluster refused the install (${lastLine(text)}): the chart makes Roles, a ServiceAccount and agent-sandbox objects in ${ctx.namespace}; run it with a context allowed to`,
    );
  if (/another operation \(install\/upgrade\/rollback\) is in progress/.test(text))
    return new Error(`another helm operation on this release is in progress: wait for it, or see \`helm history\` -n ${ctx.namespace}`);
  return new Error(`helm failed (exit ${r.code}): ${text.replace(/^Error: /, '')}`);
}

function lastLine(text: string): string {
  return (
    text
      .split('\n')
      .filter(Boolean)
      .pop()
      ?.replace(/^Error: /, '') ?? text
  );
}

interface HelmRelease {
  name: string;
  namespace: string;
  version: number;
  manifest?: string;
  hooks?: { manifest?: string }[];
  info?: { status?: string };
  chart?: { metadata?: { version?: string; appVersion?: string } };
}

/** The kinds and names of a rendered manifest, in order (for the plan's summary). */
function objectsOf(manifest: string): { kind: string; name: string; namespace?: string }[] {
  const out: { kind: string; name: string; namespace?: string }[] = [];
  for (const doc of manifest.split(/^---\s*$/m)) {
    const kind = /^kind:\s*(\S+)/m.exec(doc)?.[1];
    const name = /^metadata:\s*\n(?:\s+.*\n)*?\s+name:\s*(\S+)/m.exec(doc)?.[1];
    const namespace = /^metadata:\s*\n(?:\s+.*\n)*?\s+namespace:\s*(\S+)/m.exec(doc)?.[1];
    if (kind && name) out.push({ kind, name, ...(namespace ? { namespace } : {}) });
  }
  return out;
}

function fullManifest(r: HelmRelease): string {
  return [r.manifest ?? '', ...(r.hooks ?? []).map((h) => h.manifest ?? '')].filter((m) => m.trim() !== '').join('\n---\n');
}

/** `atelier server install --kubernetes [--plan]`. Returns the exit code; errors are thrown. */
export async function kubernetesInstall(flags: KubernetesInstallFlags, output: string): Promise<number> {
  const helm = findHelm();
  const chart = shippedChart();
  checkKubeconfig(flags);
  const namespace = flags.namespace ?? DEFAULT_NAMESPACE;
  const release = flags.releaseName ?? DEFAULT_RELEASE;
  for (const file of flags.values ?? [])
    if (!existsSync(file)) throw new Error(`--values ${file}: no such file: give a YAML file of chart values`);
  const common = [
    '--namespace',
    namespace,
    ...(flags.kubeconfig !== undefined ? ['--kubeconfig', resolve(flags.kubeconfig)] : []),
    ...(flags.kubeContext !== undefined ? ['--kube-context', flags.kubeContext] : []),
  ];
  const valueArgs = [...(flags.values ?? []).flatMap((f) => ['--values', resolve(f)]), ...(flags.set ?? []).flatMap((s) => ['--set', s])];
  const ctx = { namespace, kubeContext: flags.kubeContext };
  const emit = emitter(output);

  // Rendered by the cluster's own capabilities and checked by the API server, changing nothing:
  // the chart's prerequisites check runs on what this cluster serves, as in the real install.
  const dry = await runHelm(helm, ['upgrade', release, chart, '--install', '--dry-run=server', '-o', 'json', ...common, ...valueArgs]);
  if (dry.code !== 0) throw helmError(dry, ctx);
  const planned = JSON.parse(dry.stdout) as HelmRelease;
  const manifest = fullManifest(planned);
  const deployed = await runHelm(helm, ['get', 'manifest', release, ...common]);
  const status = deployed.code === 0 ? await runHelm(helm, ['status', release, '-o', 'json', ...common]) : undefined;
  const current = status?.code === 0 ? (JSON.parse(status.stdout) as HelmRelease) : undefined;
  const same = current?.info?.status === 'deployed' && deployed.stdout.trim() === (planned.manifest ?? '').trim();
  const action = current === undefined ? 'install' : same ? 'none' : 'upgrade';

  if (flags.plan) {
    const objects = objectsOf(manifest);
    const what =
      action === 'install'
        ? `would install release ${release} in namespace ${namespace}`
        : action === 'none'
          ? `release ${release} in namespace ${namespace} is already as rendered: nothing would change`
          : `would upgrade release ${release} in namespace ${namespace} (now revision ${current!.version})`;
    if (output === 'json') {
      emit({ event: 'done', plan: true, action, release, namespace, chart, objects, manifest, message: `plan only: ${what}` });
    } else {
      process.stdout.write(manifest.endsWith('\n') ? manifest : `${manifest}\n`);
      emit({
        event: 'done',
        message: `plan only: ${what} (${objects.length} objects above); nothing was changed (run without --plan to apply)`,
      });
    }
    return 0;
  }

  if (action === 'none') {
    emit({
      event: 'done',
      changed: 0,
      action,
      release,
      namespace,
      revision: current!.version,
      message: `no change: release ${release} in namespace ${namespace} (revision ${current!.version}) is already as rendered`,
    });
    return 0;
  }
  const applied = await runHelm(helm, ['upgrade', release, chart, '--install', '-o', 'json', ...common, ...valueArgs]);
  if (applied.code !== 0) throw helmError(applied, ctx);
  const done = JSON.parse(applied.stdout) as HelmRelease;
  const verb = action === 'install' ? 'installed' : 'upgraded';
  emit({
    event: 'done',
    changed: 1,
    action: verb,
    release,
    namespace,
    revision: done.version,
    chartVersion: done.chart?.metadata?.version,
    message: [
      `${verb}: release ${release} in namespace ${namespace}, revision ${done.version} (chart ${done.chart?.metadata?.version ?? '?'}).`,
      `Watch the rollout: kubectl -n ${namespace} rollout status deployment/${release.includes('atelier') ? release : `${release}-atelier`}${flags.kubeContext ? ` --context ${flags.kubeContext}` : ''}`,
      `History and rollback: helm -n ${namespace} history ${release}; helm -n ${namespace} rollback ${release}`,
    ].join('\n'),
  });
  return 0;
}
