import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { emitter, runSteps } from './host/engine.js';
import { hostLayout, parseEnvFile, runningRelease, type HostLayout } from './host/layout.js';
import { localUrl } from './host/service.js';
import { LETS_ENCRYPT, acmeReachable, installedTlsSource, trustAdvice, tlsPaths, type TlsSettings } from './host/tls.js';
import { installSteps, type InstallSettings, type StepContext } from './host/steps.js';
import type { KubernetesInstallFlags } from './kubernetes.js';

export interface ServerInstallFlags extends KubernetesInstallFlags {
  prefix?: string;
  dataDir?: string;
  listen?: string;
  databaseUrl?: string;
  publicUrl?: string;
  domain?: string;
  email?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsListen?: string;
  acmeDirectory?: string;
  /** false with --no-tls: plain HTTP only, an installed TLS removed. */
  tls?: boolean;
  yes?: boolean;
  /** Install the Helm chart on the kubeconfig's cluster instead of a service on this machine. */
  kubernetes?: boolean;
}

/** The flags that only mean something for one of the two installs. */
const KUBERNETES_ONLY = ['kubeconfig', 'kubeContext', 'namespace', 'releaseName', 'values', 'set'] as const;
const HOST_ONLY = [
  'prefix',
  'dataDir',
  'listen',
  'databaseUrl',
  'publicUrl',
  'domain',
  'email',
  'tlsCert',
  'tlsKey',
  'tlsListen',
  'acmeDirectory',
] as const;
const flagName = (key: string): string => `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/** Root is needed for the service, the sandboxes and /etc: said before anything is looked at. */
export function requireRoot(command: string): void {
  if (process.getuid?.() !== 0)
    throw new Error(
      `\`atelier server ${command}\` changes the system (service, /etc, /opt): run it as root, e.g. \`sudo atelier server ${command}\``,
    );
}

/** The release this program runs from, which must be one unpacked under the layout's releases/. */
export function installedRelease(layout: HostLayout): { root: string; version: string } {
  const release = runningRelease();
  if (!release)
    throw new Error(
      'this `atelier` is not an unpacked release (no RELEASE.json above it): install with scripts/get.sh, which unpacks one and runs this',
    );
  const expected = join(layout.releases, release.version);
  const same = existsSync(expected) && realpathSync(expected) === realpathSync(release.root);
  return { root: same ? expected : release.root, version: release.version };
}

/** Flags first, then what the installed configuration says (a re-run keeps it), then defaults. */
export function resolveSettings(layout: HostLayout, flags: ServerInstallFlags): InstallSettings {
  const existing = existsSync(layout.envFile) ? parseEnvFile(readFileSync(layout.envFile, 'utf8')) : {};
  const dataDir =
    flags.dataDir !== undefined ? hostLayout(layout.prefix, flags.dataDir).dataDir : (existing.ATELIER_DATA_DIR ?? layout.dataDir);
  return {
    listen: flags.listen ?? existing.ATELIER_LISTEN ?? '127.0.0.1:7878',
    dataDir,
    databaseUrl: flags.databaseUrl ?? existing.ATELIER_DATABASE_URL,
    publicUrl: flags.publicUrl ?? existing.ATELIER_PUBLIC_URL,
  };
}

const TLS_FLAGS = [
  ['--domain', 'domain'],
  ['--email', 'email'],
  ['--tls-cert', 'tlsCert'],
  ['--tls-key', 'tlsKey'],
  ['--tls-listen', 'tlsListen'],
  ['--acme-directory', 'acmeDirectory'],
] as const;

/**
 * With --no-tls, what is to be removed: the HTTPS listener the configuration names (undefined when
 * it names none) and whether an https:// public URL derived from the TLS domain goes with it.
 */
function tlsToRemove(layout: HostLayout, flags: ServerInstallFlags): InstallSettings['removeTls'] {
  if (flags.tls !== false) return undefined;
  const env = existsSync(layout.envFile) ? parseEnvFile(readFileSync(layout.envFile, 'utf8')) : {};
  const domain = installedTlsSource(layout)?.domain ?? undefined;
  const publicUrl = env.ATELIER_PUBLIC_URL;
  // The install derived https://DOMAIN[:PORT] from --domain: it goes with HTTPS. One given with
  // --public-url for another name (a proxy in front) stays.
  const url = publicUrl !== undefined && URL.canParse(publicUrl) ? new URL(publicUrl) : undefined;
  const derived =
    flags.publicUrl === undefined && domain !== undefined && url?.protocol === 'https:' && url.hostname.replace(/^\[|\]$/g, '') === domain;
  return { listen: env.ATELIER_TLS_CERT !== undefined ? env.ATELIER_TLS_LISTEN : undefined, dropPublicUrl: derived };
}

/**
 * TLS from the flags, else as installed (a re-run keeps it). --email picks ACME when its directory
 * answers now, else a local CA (said in the plan and at the end).
 */
async function resolveTls(layout: HostLayout, flags: ServerInstallFlags): Promise<TlsSettings | undefined> {
  const env = existsSync(layout.envFile) ? parseEnvFile(readFileSync(layout.envFile, 'utf8')) : {};
  if (flags.tls === false) {
    const both = TLS_FLAGS.filter(([, key]) => flags[key] !== undefined).map(([flag]) => flag);
    if (both.length > 0)
      throw new Error(
        `--no-tls serves plain HTTP only, and ${both.join(', ')} ask${both.length === 1 ? 's' : ''} for HTTPS: give one or the other`,
      );
    return undefined;
  }
  const installed = env.ATELIER_TLS_CERT !== undefined ? installedTlsSource(layout) : undefined;
  const asked = flags.domain ?? flags.email ?? flags.tlsCert ?? flags.tlsKey ?? flags.tlsListen ?? flags.acmeDirectory;
  if (asked === undefined && installed === undefined) return undefined;
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
    throw new Error('--tls-cert and --tls-key go together: give the certificate file and its key file');
  if (flags.tlsCert !== undefined && flags.email !== undefined)
    throw new Error('--email asks an ACME CA for the certificate and --tls-cert gives one: use one of them');
  const installedDomain = installed?.domain ?? undefined;
  const domain =
    flags.domain ??
    installedDomain ??
    (env.ATELIER_PUBLIC_URL ? new URL(env.ATELIER_PUBLIC_URL).hostname.replace(/^\[|\]$/g, '') : undefined);
  const listen = flags.tlsListen ?? env.ATELIER_TLS_LISTEN ?? '0.0.0.0:443';
  if (flags.tlsCert !== undefined)
    return { domain: flags.domain, listen, source: { kind: 'files', cert: resolve(flags.tlsCert), key: resolve(flags.tlsKey!) } };
  const directory = flags.acmeDirectory ?? (installed?.kind === 'acme' ? installed.directory : LETS_ENCRYPT);
  const email = flags.email ?? (installed?.kind === 'acme' ? installed.email : undefined);
  if (email !== undefined) {
    if (!/^[^@\s]+@[^@\s]+$/.test(email)) throw new Error(`--email must be an address such as admin@example.com, got "${email}"`);
    const unreachable = await acmeReachable(directory);
    return unreachable === undefined || (installed?.kind === 'acme' && flags.email === undefined)
      ? { domain, listen, source: { kind: 'acme', email, directory } }
      : { domain, listen, source: { kind: 'local' }, fallback: `the ACME CA is not used: ${unreachable}` };
  }
  if (flags.domain === undefined && installed?.kind === 'files')
    return { domain: installedDomain, listen, source: { kind: 'files', cert: installed.cert, key: installed.key } };
  return { domain, listen, source: { kind: 'local' } };
}

async function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
  } finally {
    rl.close();
  }
}

/** `atelier server install`: the typed, journaled, idempotent install of this release as a service. */
export async function serverInstall(flags: ServerInstallFlags, output: string, pgBinDir: string | undefined): Promise<number> {
  const given = (keys: readonly string[]): string[] =>
    keys.filter((k) => {
      const v = flags[k as keyof ServerInstallFlags];
      return v !== undefined && !(Array.isArray(v) && v.length === 0);
    });
  if (flags.kubernetes) {
    const host = given(HOST_ONLY);
    if (host.length > 0 || flags.tls === false)
      throw new Error(
        `${[...host.map(flagName), ...(flags.tls === false ? ['--no-tls'] : [])].join(', ')} configure a service on this machine, not the Helm chart: with --kubernetes give chart values with --values FILE or --set KEY=VALUE (deploy/helm/atelier/values.yaml)`,
      );
    const { kubernetesInstall } = await import('./kubernetes.js');
    return kubernetesInstall(flags, output);
  }
  const kube = given(KUBERNETES_ONLY);
  if (kube.length > 0)
    throw new Error(
      `${kube.map(flagName).join(', ')} go${kube.length === 1 ? 'es' : ''} with --kubernetes (installing the Helm chart on a cluster)`,
    );
  requireRoot('install');
  const base = hostLayout(flags.prefix);
  const settings = resolveSettings(base, flags);
  const layout = hostLayout(flags.prefix, settings.dataDir);
  settings.tls = await resolveTls(layout, flags);
  settings.removeTls = tlsToRemove(layout, flags);
  if (settings.removeTls?.dropPublicUrl) settings.publicUrl = undefined;
  // A new --domain derives a new public URL (https://DOMAIN) unless --public-url says otherwise.
  if (flags.domain !== undefined && flags.publicUrl === undefined) settings.publicUrl = undefined;
  if (settings.tls && flags.listen === undefined && !existsSync(layout.envFile) && settings.tls.source.kind === 'acme')
    // The CA validates on port 80: the plain listener takes it (other machines are redirected to HTTPS).
    settings.listen = '0.0.0.0:80';
  const emit = emitter(output);
  const ctx: StepContext = {
    layout,
    settings,
    release: installedRelease(layout),
    pgBinDir,
    say: (line) => emit({ event: 'log', message: `atelier: ${line}` }),
  };
  const opts = { emit, journalPath: layout.journal };
  const steps = installSteps(settings);

  if (!flags.plan && !flags.yes && process.stdin.isTTY) {
    await runSteps(steps, ctx, { ...opts, plan: true });
    if (!(await confirm('Apply these steps?'))) {
      emit({ event: 'done', message: 'nothing done', changed: 0 });
      return 1;
    }
  }
  const t0 = Date.now();
  const { changed } = await runSteps(steps, ctx, { ...opts, plan: flags.plan === true });
  const credentials = join(settings.dataDir, 'credentials.txt');
  const url = localUrl(settings.listen);
  const httpsUrl = settings.tls ? (parseEnvFile(readFileSync(layout.envFile, 'utf8')).ATELIER_PUBLIC_URL ?? undefined) : undefined;
  const tlsLines = settings.tls
    ? [
        `HTTPS: ${httpsUrl ?? `https://THIS-HOST${settings.tls.listen.endsWith(':443') ? '' : `:${settings.tls.listen.split(':').pop()}`}`} (served on ${settings.tls.listen}; certificate ${tlsPaths(layout).cert}).`,
        ...trustAdvice(layout, settings.tls, httpsUrl ?? url),
      ]
    : [];
  if (flags.plan) {
    emit({ event: 'done', plan: true, message: 'plan only: nothing was changed (run without --plan to apply)' });
    return 0;
  }
  const message =
    changed === 0
      ? [`no change: Atelier ${ctx.release.version} is already installed and running at ${url}`, ...tlsLines].join('\n')
      : [
          `Atelier ${ctx.release.version} is installed and running at ${url} (${((Date.now() - t0) / 1000).toFixed(1)} s).`,
          ...tlsLines,
          `Admin credentials (URL, user, token, one-time password): ${credentials} (0600, root only).`,
          'Next:',
          "  atelier workshops create --repo PATH      # as root: the server added the CLI context 'local'",
          `  atelier context add NAME --url ${url} && atelier auth login   # as another user`,
          `Server log: ${join(layout.logDir, 'server.log')}. \`atelier server uninstall\` removes the service (data kept).`,
        ].join('\n');
  emit({ event: 'done', changed, version: ctx.release.version, url, ...(httpsUrl ? { httpsUrl } : {}), credentials, message });
  return 0;
}
