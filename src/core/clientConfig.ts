import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { loadYaml } from './yaml.js';
import { join } from 'node:path';

/**
 * The CLI's config: `config.yaml` (contexts, no secrets) and `tokens.json` beside it (mode
 * 0600, one token per context). Both are written atomically (temporary file, then rename).
 */
export interface ClientContext {
  name: string;
  url: string;
}

export interface ClientConfig {
  version: 1;
  currentContext: string | null;
  contexts: ClientContext[];
}

const EMPTY: ClientConfig = { version: 1, currentContext: null, contexts: [] };

function writeAtomic(path: string, content: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content, { mode: 0o600 });
  renameSync(tmp, path);
  chmodSync(path, 0o600);
}

function checkMode(path: string): void {
  // A config readable by others is fixed, not trusted as is: it may sit beside a token file.
  const mode = statSync(path).mode & 0o777;
  if (mode & 0o077) chmodSync(path, 0o600);
}

/** Reads config.yaml; a missing file is an empty config. */
export async function readClientConfig(dir: string): Promise<ClientConfig> {
  const path = join(dir, 'config.yaml');
  if (!existsSync(path)) return structuredClone(EMPTY);
  checkMode(path);
  const { parse } = await loadYaml();
  let doc: unknown;
  try {
    doc = parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`${path} is not valid YAML (${(err as Error).message.split('\n')[0]}): fix it or move it away`);
  }
  const d = (doc ?? {}) as { version?: unknown; 'current-context'?: unknown; contexts?: unknown };
  if (d.version !== undefined && d.version !== 1)
    throw new Error(`${path} has version ${String(d.version)}, which this atelier does not know: upgrade atelier`);
  const contexts: ClientContext[] = [];
  if (Array.isArray(d.contexts)) {
    for (const c of d.contexts as { name?: unknown; url?: unknown }[]) {
      if (typeof c?.name === 'string' && typeof c.url === 'string') contexts.push({ name: c.name, url: c.url });
    }
  }
  const current = typeof d['current-context'] === 'string' ? d['current-context'] : null;
  return { version: 1, currentContext: current, contexts };
}

/** Writes config.yaml (mode 0600). */
export async function writeClientConfig(dir: string, config: ClientConfig): Promise<void> {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const { stringify } = await loadYaml();
  const text = `# Atelier CLI configuration. Tokens are not here: they are in tokens.json (mode 0600).\n${stringify({ version: 1, 'current-context': config.currentContext, contexts: config.contexts })}`;
  writeAtomic(join(dir, 'config.yaml'), text);
}

/** Reads the token for a context from tokens.json. */
export function readToken(dir: string, context: string): string | undefined {
  const path = join(dir, 'tokens.json');
  if (!existsSync(path)) return undefined;
  checkMode(path);
  try {
    const d = JSON.parse(readFileSync(path, 'utf8')) as { tokens?: Record<string, string> };
    return d.tokens?.[context];
  } catch {
    throw new Error(`${path} is not valid JSON: remove it and log in again`);
  }
}

/** Stores the token for a context in tokens.json (mode 0600). */
export function writeToken(dir: string, context: string, token: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = join(dir, 'tokens.json');
  let tokens: Record<string, string> = {};
  if (existsSync(path)) {
    try {
      tokens = (JSON.parse(readFileSync(path, 'utf8')) as { tokens?: Record<string, string> }).tokens ?? {};
    } catch {
      tokens = {};
    }
  }
  tokens[context] = token;
  writeAtomic(path, `${JSON.stringify({ version: 1, tokens }, null, 2)}\n`);
}
