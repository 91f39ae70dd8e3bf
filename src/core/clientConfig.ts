import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { AtelierError } from './errors.js';
import { writeFileAtomic } from './files.js';
import { loadYaml } from './yaml.js';

/**
 * The CLI's config directory: `config.yaml` (contexts, never a secret) and, when the OS keyring
 * is not available (or for what the server writes), `credentials.json` beside it. Both mode
 * 0600 in a 0700 directory, written atomically (temporary file, then rename).
 *
 * Versions: 2 is current. 1 (`version: 1`, tokens in `tokens.json`) and 0 (no version, a
 * `token:` inline in a context) are migrated to 2 the first time they are read.
 */
export interface ClientContext {
  name: string;
  url: string;
  /** Sent as `x-atelier-tenant`; absent → the user's first tenant. */
  tenant?: string;
  /** How this context logs in: a pasted API token, or `atelier auth login` (OIDC device flow). */
  auth: 'token' | 'oidc';
}

export interface ClientConfig {
  version: 2;
  currentContext: string | null;
  contexts: ClientContext[];
}

/** A context's secret: an API token, or the tokens of an OIDC login. */
export type Credential =
  | { kind: 'api-token'; token: string }
  | {
      kind: 'oidc';
      accessToken: string;
      refreshToken?: string;
      idToken?: string;
      /** Which token goes in `Authorization: Bearer` (an opaque access token, as Google's, cannot be verified by the server). */
      bearer: 'access' | 'id';
      /** When the bearer token expires (ISO 8601), or null when the issuer did not say. */
      expiresAt: string | null;
      issuer: string;
      clientId: string;
      /** The server's relay endpoints, used to refresh and revoke. */
      tokenEndpoint: string;
      revocationEndpoint?: string;
      /** The issuer's ID token signing algorithm when it is not RS256 (from the server's /v1/auth/config). */
      idTokenAlg?: string;
    };

export interface ConfigIo {
  /** One-line notices (permissions fixed, file migrated); default: stderr. */
  notice?: (line: string) => void;
}

const CURRENT_VERSION = 2;
const CONFIG = 'config.yaml';
const CREDENTIALS = 'credentials.json';
const LEGACY_TOKENS = 'tokens.json';

/** The files of a config directory that may hold what the server wrote (for handing them to another owner). */
export function clientConfigFiles(dir: string): string[] {
  return [join(dir, CONFIG), join(dir, CREDENTIALS)];
}

const stderrNotice = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

function writeAtomic(path: string, content: string): void {
  writeFileAtomic(path, content, 0o600, { durable: true });
}

/**
 * A config file or directory open to other users is tightened when it is ours (root may
 * tighten anyone's), and refused otherwise: a token file readable by others is not trusted.
 */
function ensurePrivate(path: string, wanted: 0o600 | 0o700, notice: (l: string) => void): void {
  let st;
  try {
    st = statSync(path);
  } catch {
    return;
  }
  if ((st.mode & 0o077) === 0) return;
  const uid = typeof process.getuid === 'function' ? process.getuid() : undefined;
  if (uid === undefined) return;
  const mode = (st.mode & 0o777).toString(8);
  if (st.uid !== uid && uid !== 0) {
    throw new AtelierError(
      'PERMISSION_DENIED',
      `${path} has mode ${mode} (open to other users) and belongs to uid ${st.uid}, not to you: ask its owner to run \`chmod ${wanted.toString(8)} ${path}\`, or set ATELIER_CONFIG_DIR to a directory of your own`,
    );
  }
  chmodSync(path, wanted);
  notice(`notice: ${path} had mode ${mode} (open to other users); it is now ${wanted.toString(8)}`);
}

function checkDir(dir: string, notice: (l: string) => void): void {
  ensurePrivate(dir, 0o700, notice);
  for (const f of [CONFIG, CREDENTIALS, LEGACY_TOKENS]) ensurePrivate(join(dir, f), 0o600, notice);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function parseContexts(raw: unknown, version: number): { contexts: ClientContext[]; inlineTokens: Record<string, string> } {
  const contexts: ClientContext[] = [];
  const inlineTokens: Record<string, string> = {};
  if (!Array.isArray(raw)) return { contexts, inlineTokens };
  for (const c of raw) {
    if (!isObject(c) || typeof c.name !== 'string' || typeof c.url !== 'string') continue;
    const ctx: ClientContext = { name: c.name, url: c.url, auth: c.auth === 'oidc' && version >= 2 ? 'oidc' : 'token' };
    if (typeof c.tenant === 'string' && c.tenant) ctx.tenant = c.tenant;
    if (version < 1 && typeof c.token === 'string' && c.token) inlineTokens[c.name] = c.token;
    contexts.push(ctx);
  }
  return { contexts, inlineTokens };
}

interface CredentialsFile {
  version: 2;
  credentials: Record<string, Credential>;
}

function isCredential(v: unknown): v is Credential {
  if (!isObject(v)) return false;
  if (v.kind === 'api-token') return typeof v.token === 'string';
  return (
    v.kind === 'oidc' &&
    typeof v.accessToken === 'string' &&
    typeof v.issuer === 'string' &&
    typeof v.clientId === 'string' &&
    typeof v.tokenEndpoint === 'string'
  );
}

function readCredentialsFile(dir: string): CredentialsFile {
  const path = join(dir, CREDENTIALS);
  if (!existsSync(path)) return { version: 2, credentials: {} };
  let d: unknown;
  try {
    d = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    throw new AtelierError('INVALID_ARGUMENT', `${path} is not valid JSON: remove it and log in again with \`atelier auth login\``);
  }
  const credentials: Record<string, Credential> = {};
  if (isObject(d) && isObject(d.credentials)) {
    for (const [name, c] of Object.entries(d.credentials)) if (isCredential(c)) credentials[name] = c;
  }
  return { version: 2, credentials };
}

function writeCredentialsFile(dir: string, file: CredentialsFile): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeAtomic(join(dir, CREDENTIALS), `${JSON.stringify(file, null, 2)}\n`);
}

function readLegacyTokens(dir: string): Record<string, string> {
  const path = join(dir, LEGACY_TOKENS);
  if (!existsSync(path)) return {};
  try {
    const d = JSON.parse(readFileSync(path, 'utf8')) as { tokens?: unknown };
    const out: Record<string, string> = {};
    if (isObject(d.tokens)) for (const [k, v] of Object.entries(d.tokens)) if (typeof v === 'string' && v) out[k] = v;
    return out;
  } catch {
    throw new AtelierError('INVALID_ARGUMENT', `${path} is not valid JSON: remove it and log in again`);
  }
}

async function serialize(config: ClientConfig): Promise<string> {
  const { stringify } = await loadYaml();
  const contexts = config.contexts.map((c) => ({ name: c.name, url: c.url, ...(c.tenant ? { tenant: c.tenant } : {}), auth: c.auth }));
  return `# Atelier CLI configuration. No secrets here: they are in the OS keyring or in credentials.json (mode 0600).\n${stringify({
    version: CURRENT_VERSION,
    'current-context': config.currentContext,
    contexts,
  })}`;
}

/**
 * Reads config.yaml; a missing file is an empty config. Fixes (or refuses) permissions open to
 * other users, and migrates an older version in place: tokens leave the YAML and tokens.json
 * for credentials.json before the new config.yaml is written.
 */
export async function readClientConfig(dir: string, io: ConfigIo = {}): Promise<ClientConfig> {
  const notice = io.notice ?? stderrNotice;
  checkDir(dir, notice);
  const path = join(dir, CONFIG);
  const legacy = readLegacyTokens(dir);
  if (!existsSync(path) && Object.keys(legacy).length === 0) return { version: 2, currentContext: null, contexts: [] };
  let doc: unknown = {};
  if (existsSync(path)) {
    const { parse } = await loadYaml();
    try {
      doc = parse(readFileSync(path, 'utf8'));
    } catch (err) {
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `${path} is not valid YAML (${(err as Error).message.split('\n')[0]}): fix it or move it away`,
      );
    }
  }
  const d = isObject(doc) ? doc : {};
  const version = d.version === undefined ? 0 : d.version;
  if (version !== 0 && version !== 1 && version !== CURRENT_VERSION) {
    throw new AtelierError(
      'UNSUPPORTED',
      `${path} has version ${JSON.stringify(version)}, which this atelier does not know (it reads versions up to ${CURRENT_VERSION}): upgrade atelier`,
    );
  }
  const { contexts, inlineTokens } = parseContexts(d.contexts, version);
  const current = typeof d['current-context'] === 'string' ? d['current-context'] : null;
  const config: ClientConfig = { version: 2, currentContext: current, contexts };
  if (version === CURRENT_VERSION && Object.keys(legacy).length === 0) return config;

  // Migration. Secrets first: a crash before config.yaml is rewritten leaves the old file, and
  // the next read migrates again (credentials already moved win over the older copies).
  const moved = { ...legacy, ...inlineTokens };
  if (Object.keys(moved).length > 0) {
    const creds = readCredentialsFile(dir);
    for (const [name, token] of Object.entries(moved)) creds.credentials[name] ??= { kind: 'api-token', token };
    writeCredentialsFile(dir, creds);
  }
  if (version !== CURRENT_VERSION) {
    try {
      writeAtomic(path, await serialize(config));
    } catch (err) {
      throw new AtelierError(
        'UNAVAILABLE',
        `cannot migrate ${path} to version ${CURRENT_VERSION} (${(err as Error).message}): make the directory writable by you`,
      );
    }
  }
  rmSync(join(dir, LEGACY_TOKENS), { force: true });
  notice(
    `notice: ${version === CURRENT_VERSION ? join(dir, LEGACY_TOKENS) : path} was migrated to version ${CURRENT_VERSION}${Object.keys(moved).length > 0 ? `; tokens moved to ${join(dir, CREDENTIALS)}` : ''}`,
  );
  return config;
}

/** Writes config.yaml (mode 0600, directory 0700). */
export async function writeClientConfig(dir: string, config: ClientConfig): Promise<void> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeAtomic(join(dir, CONFIG), await serialize(config));
}

/** The credential stored for a context in credentials.json (the file store; the CLI also has the OS keyring). */
export function readFileCredential(dir: string, context: string): Credential | undefined {
  return readCredentialsFile(dir).credentials[context];
}

/** Stores (or, with undefined, removes) a context's credential in credentials.json. */
export function writeFileCredential(dir: string, context: string, credential: Credential | undefined): void {
  const file = readCredentialsFile(dir);
  if (credential) file.credentials[context] = credential;
  else if (!(context in file.credentials)) return;
  else delete file.credentials[context];
  writeCredentialsFile(dir, file);
}

/** The API token stored in credentials.json for a context (what the server wrote for `local`). */
export function readToken(dir: string, context: string): string | undefined {
  const c = readFileCredential(dir, context);
  return c?.kind === 'api-token' ? c.token : undefined;
}

/** Stores an API token for a context in credentials.json (mode 0600). */
export function writeToken(dir: string, context: string, token: string): void {
  writeFileCredential(dir, context, { kind: 'api-token', token });
}
