import { AtelierError, readClientConfig, writeClientConfig, type ClientContext } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { createSecretStore } from '../../secrets.js';
import { table } from '../../output.js';

/** One row of `atelier context list`. */
export interface ContextView {
  name: string;
  url: string;
  tenant: string | null;
  auth: 'token' | 'oidc';
  current: boolean;
  /** Whether a credential is stored for it (API token or login). */
  loggedIn: boolean;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

function checkName(name: string): void {
  if (!NAME.test(name))
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `context name "${name}" is not valid: use 1-63 letters, digits, ".", "_" or "-", starting with a letter or digit`,
      { field: 'name' },
    );
}

function checkUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `--url "${raw}" is not a URL: give the server's address, for example https://atelier.example.com`,
      {
        field: 'url',
      },
    );
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new AtelierError('INVALID_ARGUMENT', `--url must be http:// or https://, got ${u.protocol}`, { field: 'url' });
  if (u.username || u.password)
    throw new AtelierError('INVALID_ARGUMENT', '--url must not contain a user name or password: use --token-stdin for a token', {
      field: 'url',
    });
  if (u.search || u.hash) throw new AtelierError('INVALID_ARGUMENT', '--url must not have a query or fragment', { field: 'url' });
  return u.href.replace(/\/+$/, '');
}

function notFound(name: string, contexts: ClientContext[]): AtelierError {
  return new AtelierError(
    'NOT_FOUND',
    `context "${name}" does not exist: known contexts are ${contexts.map((c) => c.name).join(', ') || '(none)'}`,
  );
}

/** `atelier context add NAME --url URL [--tenant T] [--token-stdin]` */
export async function addContext(
  ctx: CommandContext,
  name: string,
  flags: { url: string; tenant?: string; token?: string },
): Promise<ContextView> {
  checkName(name);
  const url = checkUrl(flags.url);
  const dir = ctx.config.configDir;
  const cc = await readClientConfig(dir);
  if (cc.contexts.some((c) => c.name === name))
    throw new AtelierError('ALREADY_EXISTS', `context "${name}" already exists: remove it first with \`atelier context remove ${name}\``);
  if (flags.token !== undefined && !flags.token)
    throw new AtelierError('INVALID_ARGUMENT', '--token-stdin read no token: pipe the API token on standard input', { field: 'token' });
  const entry: ClientContext = { name, url, auth: flags.token ? 'token' : 'oidc' };
  if (flags.tenant) entry.tenant = flags.tenant;
  // The secret first: a context never exists that claims a token it does not have.
  if (flags.token) createSecretStore(dir).set(name, { kind: 'api-token', token: flags.token });
  cc.contexts.push(entry);
  cc.currentContext ??= name;
  await writeClientConfig(dir, cc);
  return { name, url, tenant: entry.tenant ?? null, auth: entry.auth, current: cc.currentContext === name, loggedIn: Boolean(flags.token) };
}

/** `atelier context use NAME` */
export async function useContext(ctx: CommandContext, name: string): Promise<{ current: string }> {
  const dir = ctx.config.configDir;
  const cc = await readClientConfig(dir);
  if (!cc.contexts.some((c) => c.name === name)) throw notFound(name, cc.contexts);
  cc.currentContext = name;
  await writeClientConfig(dir, cc);
  return { current: name };
}

/** `atelier context list` */
export async function listContexts(ctx: CommandContext): Promise<ContextView[]> {
  const dir = ctx.config.configDir;
  const cc = await readClientConfig(dir);
  const store = createSecretStore(dir);
  const current = ctx.contextFlag ?? ctx.config.context ?? cc.currentContext;
  return cc.contexts.map((c) => ({
    name: c.name,
    url: c.url,
    tenant: c.tenant ?? null,
    auth: c.auth,
    current: c.name === current,
    loggedIn: store.get(c.name) !== undefined,
  }));
}

/** `atelier context current`: --context, then ATELIER_CONTEXT, then the config's current context. */
export async function currentContext(ctx: CommandContext): Promise<{ name: string; url: string; tenant: string | null; source: string }> {
  const cc = await readClientConfig(ctx.config.configDir);
  const [name, source] = ctx.contextFlag
    ? [ctx.contextFlag, '--context']
    : ctx.config.context
      ? [ctx.config.context, 'ATELIER_CONTEXT']
      : [cc.currentContext, 'config.yaml'];
  if (!name)
    throw new AtelierError(
      'NOT_FOUND',
      'no current context: add one with `atelier context add NAME --url URL` or select one with `atelier context use NAME`',
    );
  const c = cc.contexts.find((x) => x.name === name);
  if (!c) throw notFound(name, cc.contexts);
  return { name, url: c.url, tenant: c.tenant ?? null, source };
}

/** `atelier context remove NAME`: forgets the context and its stored credential (nothing is revoked). */
export async function removeContext(
  ctx: CommandContext,
  name: string,
): Promise<{ name: string; removed: true; credentialRemoved: boolean }> {
  const dir = ctx.config.configDir;
  const cc = await readClientConfig(dir);
  if (!cc.contexts.some((c) => c.name === name)) throw notFound(name, cc.contexts);
  cc.contexts = cc.contexts.filter((c) => c.name !== name);
  if (cc.currentContext === name) cc.currentContext = null;
  await writeClientConfig(dir, cc);
  const credentialRemoved = createSecretStore(dir).delete(name);
  return { name, removed: true, credentialRemoved };
}

export function contextTable(rows: ContextView[]): string {
  if (rows.length === 0) return 'No contexts. Add one with `atelier context add NAME --url URL`.';
  return table(rows, [
    { header: 'CURRENT', get: (r) => (r.current ? '*' : '') },
    { header: 'NAME', get: (r) => r.name },
    { header: 'URL', get: (r) => r.url },
    { header: 'TENANT', get: (r) => r.tenant ?? '' },
    { header: 'AUTH', get: (r) => r.auth },
    { header: 'CREDENTIAL', get: (r) => (r.loggedIn ? 'stored' : 'none') },
  ]);
}
