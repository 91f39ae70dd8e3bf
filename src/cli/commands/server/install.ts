import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { emitter, runSteps } from './host/engine.js';
import { hostLayout, parseEnvFile, runningRelease, type HostLayout } from './host/layout.js';
import { localUrl } from './host/service.js';
import { INSTALL_STEPS, type InstallSettings, type StepContext } from './host/steps.js';

export interface ServerInstallFlags {
  prefix?: string;
  dataDir?: string;
  listen?: string;
  databaseUrl?: string;
  publicUrl?: string;
  domain?: string;
  email?: string;
  tlsCert?: string;
  tlsKey?: string;
  yes?: boolean;
  plan?: boolean;
}

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
  requireRoot('install');
  for (const [flag, given] of [
    ['--domain', flags.domain],
    ['--email', flags.email],
    ['--tls-cert', flags.tlsCert],
    ['--tls-key', flags.tlsKey],
  ] as const) {
    if (given !== undefined)
      throw new Error(
        `${flag}: TLS is not done by the installer yet. Install without it and put a TLS proxy (Caddy, nginx) in front, with --public-url https://YOUR-DOMAIN (docs/server.md)`,
      );
  }
  const base = hostLayout(flags.prefix);
  const settings = resolveSettings(base, flags);
  const layout = hostLayout(flags.prefix, settings.dataDir);
  const emit = emitter(output);
  const ctx: StepContext = {
    layout,
    settings,
    release: installedRelease(layout),
    pgBinDir,
    say: (line) => emit({ event: 'log', message: `atelier: ${line}` }),
  };
  const opts = { emit, journalPath: layout.journal };

  if (!flags.plan && !flags.yes && process.stdin.isTTY) {
    await runSteps(INSTALL_STEPS, ctx, { ...opts, plan: true });
    if (!(await confirm('Apply these steps?'))) {
      emit({ event: 'done', message: 'nothing done', changed: 0 });
      return 1;
    }
  }
  const t0 = Date.now();
  const { changed } = await runSteps(INSTALL_STEPS, ctx, { ...opts, plan: flags.plan === true });
  const credentials = join(settings.dataDir, 'credentials.txt');
  const url = localUrl(settings.listen);
  if (flags.plan) {
    emit({ event: 'done', plan: true, message: 'plan only: nothing was changed (run without --plan to apply)' });
    return 0;
  }
  const message =
    changed === 0
      ? `no change: Atelier ${ctx.release.version} is already installed and running at ${url}`
      : [
          `Atelier ${ctx.release.version} is installed and running at ${url} (${((Date.now() - t0) / 1000).toFixed(1)} s).`,
          `Admin credentials (URL, user, token, one-time password): ${credentials} (0600, root only).`,
          'Next:',
          "  atelier workshops create --repo PATH      # as root: the server added the CLI context 'local'",
          `  atelier context add NAME --url ${url} && atelier auth login   # as another user`,
          `Server log: ${join(layout.logDir, 'server.log')}. \`atelier server uninstall\` removes the service (data kept).`,
        ].join('\n');
  emit({ event: 'done', changed, version: ctx.release.version, url, credentials, message });
  return 0;
}
