import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { parseListen } from '../../../../core/index.js';
import { formatEnvFile, parseEnvFile, type HostLayout } from './layout.js';
import { tlsPaths, tlsRemovalStep, tlsStep, type TlsSettings } from './tls.js';
import { healthz, serviceKind, serviceRunning, startService, stopService, waitHealthy } from './service.js';

/** What `atelier server install` was asked for, completed from the existing configuration and defaults. */
export interface InstallSettings {
  listen: string;
  databaseUrl: string | undefined;
  publicUrl: string | undefined;
  dataDir: string;
  /** HTTPS (--domain, --email, --tls-cert/--tls-key), or undefined for none. */
  tls?: TlsSettings;
  /**
   * --no-tls: plain HTTP only. `listen` is the HTTPS listener the configuration named (undefined
   * when TLS was not configured), `dropPublicUrl` whether the https:// URL derived from it goes too.
   */
  removeTls?: { listen: string | undefined; dropPublicUrl: boolean };
}

export interface StepContext {
  layout: HostLayout;
  settings: InstallSettings;
  /** The release being installed (its folder under releases/ and its version). */
  release: { root: string; version: string };
  /** ATELIER_PG_BIN_DIR (loadConfig's pgBinDir): where initdb and postgres are, else the newest installed. */
  pgBinDir: string | undefined;
  say: (line: string) => void;
}

/** The way back from one applied step, decided before its effects (ADR-008's inverse). */
export type Undo = () => Promise<void> | void;

/**
 * One typed install step: preconditions (a false one stops the install before anything changes),
 * `check` (is the machine already as wanted? then "no change"), the effects it would have (`--plan`),
 * `apply` (returns its inverse), and `verify` (after apply; a failed one undoes the step).
 */
export interface HostStep {
  name: string;
  title: string;
  preconditions(ctx: StepContext): Promise<{ ok: boolean; reason: string }[]>;
  check(ctx: StepContext): Promise<{ done: boolean; detail: string }>;
  plan(ctx: StepContext): string[];
  /** Applies the step; `record` registers its inverse before an effect that may fail half-way. */
  apply(ctx: StepContext, record: (undo: Undo) => void): Promise<{ detail: string; undo?: Undo }>;
  verify(ctx: StepContext): Promise<{ ok: boolean; detail: string }>;
}

const mode = (path: string): number | undefined => (existsSync(path) ? statSync(path).mode & 0o777 : undefined);
const octal = (m: number): string => `0${m.toString(8)}`;

function linkTarget(path: string): string | undefined {
  try {
    return lstatSync(path).isSymbolicLink() ? readlinkSync(path) : undefined;
  } catch {
    return undefined;
  }
}

/** Replaces (or makes) the link `path` → `target` in one rename. */
export function setLink(path: string, target: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.new-${process.pid}`;
  rmSync(tmp, { force: true });
  symlinkSync(target, tmp);
  renameSync(tmp, path);
}

/** The env file's content for these settings. */
export function envFor(ctx: StepContext): Record<string, string> {
  const s = ctx.settings;
  // Browsers and the issuer's redirects use the HTTPS name when there is one.
  const publicUrl = s.publicUrl ?? (s.tls ? httpsUrlOf(s.tls) : undefined);
  return {
    ATELIER_DATA_DIR: s.dataDir,
    ATELIER_LISTEN: s.listen,
    ATELIER_MASTER_KEY_FILE: ctx.layout.masterKey,
    ...(s.databaseUrl ? { ATELIER_DATABASE_URL: s.databaseUrl } : {}),
    ...(publicUrl ? { ATELIER_PUBLIC_URL: publicUrl } : {}),
    ...(s.tls
      ? { ATELIER_TLS_CERT: tlsPaths(ctx.layout).cert, ATELIER_TLS_KEY: tlsPaths(ctx.layout).key, ATELIER_TLS_LISTEN: s.tls.listen }
      : {}),
  };
}

/** https://DOMAIN[:PORT] for the TLS settings (undefined without a domain). */
function httpsUrlOf(tls: TlsSettings): string | undefined {
  if (tls.domain === undefined) return undefined;
  const port = parseListen(tls.listen).port;
  const host = tls.domain.includes(':') ? `[${tls.domain}]` : tls.domain;
  return `https://${host}${port === 443 ? '' : `:${port}`}`;
}

const releaseStep: HostStep = {
  name: 'release',
  title: 'release links (current, /usr/local/bin/atelier)',
  async preconditions({ layout, release }) {
    const cur = linkTarget(layout.current);
    const want = `releases/${release.version}`;
    return [
      {
        ok: release.root === join(layout.releases, release.version),
        reason: `this program runs from ${release.root}, not from ${join(layout.releases, release.version)}: install with scripts/get.sh (it unpacks the release there), or give the --prefix the release was unpacked under`,
      },
      {
        ok: cur === undefined || cur === want,
        reason: `another release is current (${layout.current} -> ${cur}): move to ${release.version} with \`atelier server upgrade\``,
      },
    ];
  },
  async check({ layout, release }) {
    const ok =
      linkTarget(layout.current) === `releases/${release.version}` && linkTarget(layout.binLink) === join(layout.current, 'bin/atelier');
    return { done: ok, detail: ok ? `current -> releases/${release.version}` : 'links missing' };
  },
  plan: ({ layout, release }) => [
    `link ${layout.current} -> releases/${release.version}`,
    `link ${layout.binLink} -> ${join(layout.current, 'bin/atelier')}`,
  ],
  async apply({ layout, release }) {
    const hadCurrent = linkTarget(layout.current) !== undefined;
    const oldBin = linkTarget(layout.binLink);
    setLink(layout.current, `releases/${release.version}`);
    setLink(layout.binLink, join(layout.current, 'bin/atelier'));
    return {
      detail: `current -> releases/${release.version}`,
      undo: () => {
        if (!hadCurrent) rmSync(layout.current, { force: true });
        if (oldBin === undefined) rmSync(layout.binLink, { force: true });
        else setLink(layout.binLink, oldBin);
      },
    };
  },
  async verify({ layout }) {
    const ok = existsSync(join(layout.binLink)) && existsSync(join(layout.current, 'RELEASE.json'));
    return { ok, detail: ok ? `${layout.binLink} runs the current release` : `${layout.binLink} does not reach a release` };
  },
};

/** Directories and their modes. The data dir is 0711: the embedded PostgreSQL's user must pass through it. */
function wantedDirs({ layout, settings }: StepContext): [string, number][] {
  return [
    [layout.configDir, 0o750],
    [settings.dataDir, 0o711],
    [layout.logDir, 0o750],
    [layout.runDir, 0o755],
  ];
}

const directoriesStep: HostStep = {
  name: 'directories',
  title: 'directories and their modes',
  async preconditions(ctx) {
    return wantedDirs(ctx).map(([dir]) => {
      const st = existsSync(dir) ? statSync(dir) : undefined;
      return { ok: st === undefined || st.isDirectory(), reason: `${dir} exists and is not a directory: move it away` };
    });
  },
  async check(ctx) {
    const wrong = wantedDirs(ctx).filter(([dir, m]) => mode(dir) !== m);
    return {
      done: wrong.length === 0,
      detail: wrong.length === 0 ? 'all present' : `to create or fix: ${wrong.map(([d]) => d).join(', ')}`,
    };
  },
  plan: (ctx) =>
    wantedDirs(ctx)
      .filter(([dir, m]) => mode(dir) !== m)
      .map(([dir, m]) => (mode(dir) === undefined ? `create ${dir} (${octal(m)})` : `chmod ${octal(m)} ${dir} (now ${octal(mode(dir)!)})`)),
  async apply(ctx) {
    const created: string[] = [];
    const chmodded: [string, number][] = [];
    for (const [dir, m] of wantedDirs(ctx)) {
      const before = mode(dir);
      if (before === undefined) {
        // The first missing ancestor: undo removes from there.
        let top = dir;
        while (!existsSync(dirname(top))) top = dirname(top);
        mkdirSync(dir, { recursive: true });
        created.push(top);
      } else if (before !== m) chmodded.push([dir, before]);
      chmodSync(dir, m);
    }
    return {
      detail: `${created.length} created, ${chmodded.length} modes fixed`,
      undo: () => {
        for (const dir of created.reverse()) rmSync(dir, { recursive: true, force: true });
        for (const [dir, m] of chmodded) chmodSync(dir, m);
      },
    };
  },
  async verify(ctx) {
    const wrong = wantedDirs(ctx).filter(([dir, m]) => mode(dir) !== m);
    return { ok: wrong.length === 0, detail: wrong.length === 0 ? 'modes as wanted' : `still wrong: ${wrong.map(([d]) => d).join(', ')}` };
  },
};

const configStep: HostStep = {
  name: 'configuration',
  title: 'configuration file',
  async preconditions({ settings, layout }) {
    let listenOk = true;
    let reason = '';
    try {
      parseListen(settings.listen);
    } catch (err) {
      listenOk = false;
      reason = (err as Error).message;
    }
    // Every other setting converges on a re-run (the configuration is rewritten and the server
    // restarted on it); the data dir does not: the database, the workshops and credentials.txt
    // are in the old one, and moving them is not an install's job.
    const old = existsSync(layout.envFile) ? parseEnvFile(readFileSync(layout.envFile, 'utf8')).ATELIER_DATA_DIR : undefined;
    const moved = old !== undefined && old !== settings.dataDir && existsSync(old) && readdirSync(old).length > 0;
    return [
      { ok: listenOk, reason },
      {
        ok: !moved,
        reason: `the installed server keeps its data in ${old}: install does not move it. Drop --data-dir to keep it there, or move it by hand with the server stopped (docs/server.md, "Changing the settings of an install")`,
      },
    ];
  },
  async check(ctx) {
    const want = formatEnvFile(envFor(ctx));
    const f = ctx.layout.envFile;
    const done = existsSync(f) && readFileSync(f, 'utf8') === want && mode(f) === 0o640;
    return { done, detail: done ? f : `${f} to write` };
  },
  plan: (ctx) => {
    const f = ctx.layout.envFile;
    const old = existsSync(f) ? parseEnvFile(readFileSync(f, 'utf8')) : {};
    const want = envFor(ctx);
    const changed = Object.keys({ ...old, ...want }).filter((k) => old[k] !== want[k]);
    return [`write ${f} (0640)${changed.length ? `: ${changed.join(', ')}` : ''}`];
  },
  async apply(ctx) {
    const f = ctx.layout.envFile;
    const before = existsSync(f) ? readFileSync(f) : undefined;
    const tmp = `${f}.tmp-${process.pid}`;
    writeFileSync(tmp, formatEnvFile(envFor(ctx)), { mode: 0o640 });
    chmodSync(tmp, 0o640);
    renameSync(tmp, f);
    return {
      detail: `wrote ${f}`,
      undo: () => {
        if (before === undefined) rmSync(f, { force: true });
        else writeFileSync(f, before, { mode: 0o640 });
      },
    };
  },
  async verify(ctx) {
    const env = parseEnvFile(readFileSync(ctx.layout.envFile, 'utf8'));
    const ok = env.ATELIER_DATA_DIR === ctx.settings.dataDir && env.ATELIER_LISTEN === ctx.settings.listen;
    return { ok, detail: ok ? 'reads back as written' : `${ctx.layout.envFile} does not read back as written` };
  },
};

function keyValid(path: string): boolean {
  return Buffer.from(readFileSync(path, 'utf8').trim(), 'base64').length === 32;
}

const secretsStep: HostStep = {
  name: 'secrets',
  title: 'secrets (the master key, from the kernel CSPRNG)',
  async preconditions({ layout }) {
    // An existing key seals data already written: never replace it.
    return [
      {
        ok: !existsSync(layout.masterKey) || keyValid(layout.masterKey),
        reason: `${layout.masterKey} exists but does not hold a 32-byte base64 key: restore it from your backup (it seals stored secrets; a new one cannot read them)`,
      },
    ];
  },
  async check({ layout }) {
    const done = existsSync(layout.masterKey) && mode(layout.masterKey) === 0o600;
    return { done, detail: done ? `${layout.masterKey} present (kept)` : `${layout.masterKey} to create` };
  },
  plan: ({ layout }) => [
    existsSync(layout.masterKey) ? `chmod 0600 ${layout.masterKey}` : `create ${layout.masterKey} (0600, 32 random bytes)`,
  ],
  async apply({ layout }) {
    const existed = existsSync(layout.masterKey);
    // 'wx': never overwrites a key that appeared meanwhile.
    if (!existed) writeFileSync(layout.masterKey, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
    chmodSync(layout.masterKey, 0o600);
    return {
      detail: existed ? 'mode fixed' : 'created',
      undo: () => {
        if (!existed) rmSync(layout.masterKey, { force: true });
      },
    };
  },
  async verify({ layout }) {
    const ok = keyValid(layout.masterKey) && mode(layout.masterKey) === 0o600;
    return { ok, detail: ok ? '32-byte key, 0600' : `${layout.masterKey} is not a 0600 32-byte key` };
  },
};

const databaseStep: HostStep = {
  name: 'database',
  title: 'database (the embedded PostgreSQL cluster)',
  async preconditions({ settings, pgBinDir }) {
    if (settings.databaseUrl) {
      const pg = (await import('pg')).default;
      const client = new pg.Client({ connectionString: settings.databaseUrl, connectionTimeoutMillis: 10_000 });
      try {
        await client.connect();
        await client.query('select 1');
        return [{ ok: true, reason: '' }];
      } catch (err) {
        return [{ ok: false, reason: `cannot reach --database-url: ${(err as Error).message}` }];
      } finally {
        await client.end().catch(() => undefined);
      }
    }
    const { findPgBinDir } = await import('../../../../db/index.js');
    try {
      findPgBinDir(pgBinDir);
    } catch (err) {
      return [{ ok: false, reason: (err as Error).message }];
    }
    return [];
  },
  async check({ settings }) {
    if (settings.databaseUrl) return { done: true, detail: 'external database (reachable)' };
    const done = existsSync(join(settings.dataDir, 'pg', 'PG_VERSION'));
    return { done, detail: done ? `cluster in ${join(settings.dataDir, 'pg')}` : 'cluster to create' };
  },
  plan: ({ settings }) => [`initdb ${join(settings.dataDir, 'pg')} (owned by the postgres user; unix socket only)`],
  async apply({ settings, say, pgBinDir }, record) {
    const { startEmbeddedPostgres } = await import('../../../../db/index.js');
    record(() => {
      rmSync(join(settings.dataDir, 'pg'), { recursive: true, force: true });
      rmSync(join(settings.dataDir, 'pgsock'), { recursive: true, force: true });
    });
    const pg = await startEmbeddedPostgres({ dataDir: settings.dataDir, binDir: pgBinDir, isRoot: true, log: say });
    await pg.stop();
    return { detail: `created ${join(settings.dataDir, 'pg')}` };
  },
  async verify({ settings }) {
    const ok = settings.databaseUrl !== undefined || existsSync(join(settings.dataDir, 'pg', 'PG_VERSION'));
    return { ok, detail: ok ? 'cluster present' : 'no PG_VERSION in the cluster' };
  },
};

/** The configuration was written after the running server started (its lock file is written at start). */
function configNewer({ layout, settings }: StepContext): boolean {
  const pid = join(settings.dataDir, 'server.pid');
  return existsSync(layout.envFile) && existsSync(pid) && statSync(layout.envFile).mtimeMs > statSync(pid).mtimeMs;
}

const serviceStep: HostStep = {
  name: 'service',
  title: 'service',
  async preconditions() {
    return [];
  },
  async check(ctx) {
    const running = serviceRunning(ctx.layout);
    const health = running ? await healthz(ctx.settings.listen) : undefined;
    const stale = running && configNewer(ctx);
    const done = running && health?.version === ctx.release.version && !stale;
    return {
      done,
      detail: done
        ? `${serviceKind()} running, healthy (version ${health!.version})`
        : stale
          ? `${ctx.layout.envFile} changed since the server started: to restart`
          : running
            ? 'running but not healthy on this release'
            : 'not running',
    };
  },
  plan: (ctx) =>
    serviceKind() === 'systemd'
      ? [`write ${ctx.layout.unitFile}`, 'systemctl daemon-reload', 'systemctl enable --now atelier']
      : [
          `start the supervisor (pid file ${ctx.layout.supervisorPid}, log ${join(ctx.layout.logDir, 'server.log')})`,
          `wait for http://${ctx.settings.listen}/healthz`,
        ],
  async apply(ctx, record) {
    if (serviceRunning(ctx.layout)) await stopService(ctx.layout);
    const unitExisted = existsSync(ctx.layout.unitFile);
    record(async () => {
      await stopService(ctx.layout);
      if (!unitExisted) rmSync(ctx.layout.unitFile, { force: true });
    });
    await startService(ctx.layout);
    await waitHealthy(ctx.settings.listen, ctx.release.version, ctx.layout);
    return { detail: `${serviceKind()} started` };
  },
  async verify(ctx) {
    const h = await healthz(ctx.settings.listen);
    const ok = h?.version === ctx.release.version;
    return { ok, detail: ok ? `healthy, version ${h!.version}` : `/healthz answers ${JSON.stringify(h)}` };
  },
};

function credentialsReady(path: string): boolean {
  return existsSync(path) && mode(path) === 0o600 && /^url: http/m.test(readFileSync(path, 'utf8'));
}

const credentialsStep: HostStep = {
  name: 'credentials',
  title: 'credentials.txt (0600: URL, admin account)',
  async preconditions() {
    return [];
  },
  async check({ settings }) {
    const path = join(settings.dataDir, 'credentials.txt');
    const done = credentialsReady(path);
    return { done, detail: done ? path : `${path} not written yet` };
  },
  plan: ({ settings }) => [`wait for the server to write ${join(settings.dataDir, 'credentials.txt')} (0600)`],
  async apply({ settings }) {
    const path = join(settings.dataDir, 'credentials.txt');
    const deadline = Date.now() + 60_000;
    while (!credentialsReady(path)) {
      if (Date.now() > deadline) throw new Error(`the server did not write ${path} within 60 s: see the server log`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // Written by the server, which keeps it: the service step's inverse stops the server.
    return { detail: path, undo: () => undefined };
  },
  async verify({ settings }) {
    const ok = credentialsReady(join(settings.dataDir, 'credentials.txt'));
    return { ok, detail: ok ? '0600, with the URL' : 'missing, not 0600, or without a URL' };
  },
};

/**
 * Install order: TLS after the service (the server answers the ACME challenge), when asked for or
 * installed; with --no-tls its removal in the same place (after the service restarted without it,
 * so the running server never reads files that are gone).
 */
export function installSteps(settings: InstallSettings): HostStep[] {
  const tls = settings.tls ? tlsStep : settings.removeTls ? tlsRemovalStep : undefined;
  if (!tls) return INSTALL_STEPS;
  const i = INSTALL_STEPS.indexOf(serviceStep) + 1;
  return [...INSTALL_STEPS.slice(0, i), tls, ...INSTALL_STEPS.slice(i)];
}

/** Install order without TLS; uninstall walks it backwards. */
export const INSTALL_STEPS: HostStep[] = [
  releaseStep,
  directoriesStep,
  configStep,
  secretsStep,
  databaseStep,
  serviceStep,
  credentialsStep,
];
