import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { AtelierError, writeFileAtomic } from '../../../core/index.js';
import { sdkFor } from '../../client.js';
import type { CommandContext } from '../../context.js';

const BEGIN = '# --- BEGIN ATELIER (managed by `atelier config-ssh`; edit outside this block) ---';
const END = '# --- END ATELIER ---';

export interface ConfigSshResult {
  file: string;
  hosts: string[];
  key: string | null;
  removed: boolean;
}

/** Where the per-user key and the pinned host keys live (beside the CLI's config). */
function sshDir(ctx: CommandContext): string {
  return join(ctx.config.configDir, 'ssh');
}

/** Double-quotes a path for ssh_config when it needs it. */
function q(text: string): string {
  return /^[A-Za-z0-9_./@%+=:,-]+$/.test(text) ? text : `"${text.replace(/(["\\])/g, '\\$1')}"`;
}

/** The user's key pair, generated with ssh-keygen on first use (ed25519, no passphrase, 0600). */
function ensureKey(ctx: CommandContext): string {
  const dir = sshDir(ctx);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const key = join(dir, 'id_ed25519');
  if (!existsSync(key)) {
    try {
      execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'atelier', '-f', key], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { stderr?: Buffer };
      if (e.code === 'ENOENT')
        throw new AtelierError(
          'UNSUPPORTED',
          'ssh-keygen is not installed: install the OpenSSH client (apt install openssh-client) and run this again',
        );
      throw new AtelierError('INTERNAL', `ssh-keygen failed: ${e.stderr?.toString().trim() ?? e.message}`);
    }
  }
  return key;
}

/** Replaces (or removes, with `block` null) the managed block, keeping every other line as it was. */
export function withManagedBlock(text: string, block: string | null): string {
  const lines = text.split('\n');
  const start = lines.indexOf(BEGIN);
  const end = start >= 0 ? lines.indexOf(END, start) : -1;
  let rest = lines;
  let at = lines.length;
  if (start >= 0 && end > start) {
    rest = [...lines.slice(0, start), ...lines.slice(end + 1)];
    at = start;
  }
  if (block === null) {
    // Drop the blank line we put after the block (or before it, if the user moved it).
    if (start >= 0 && at === 0 && rest[0] === '') rest.splice(0, 1);
    else if (start >= 0 && at > 0 && rest[at - 1] === '') rest.splice(at - 1, 1);
    return rest.join('\n');
  }
  // ssh_config applies the first value it reads: the managed block goes first so that a broad
  // `Host *` of the user's further down cannot override it; the user's own lines stay intact.
  if (start < 0) {
    const body = text.length === 0 ? '' : `\n${text}`;
    return `${block}\n${body}`;
  }
  return [...rest.slice(0, at), ...block.split('\n'), ...rest.slice(at)].join('\n');
}

function writeAtomic(file: string, text: string): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  writeFileAtomic(file, text, 0o600, { durable: true });
}

/** How ssh runs this CLI as its ProxyCommand: the same node and script, and the same context. */
function proxyCommand(ctx: CommandContext, contextName: string | null, id: string): string {
  const script = process.argv[1] ?? 'atelier';
  const ctxFlag = contextName ? ` --context ${q(contextName)}` : '';
  return `${q(process.execPath)} ${q(script)}${ctxFlag} port-forward --stdio ${id} 22`;
}

/**
 * `atelier config-ssh [--remove]`: a managed block in ~/.ssh/config with a `Host atelier-<id>`
 * entry per workshop (ProxyCommand through the CLI's tunnel, the per-user key, the workshop's
 * host key pinned in a known_hosts file of ours: no trust-on-first-use prompt). Idempotent;
 * the user's own lines are left as they are.
 */
export async function configSsh(ctx: CommandContext, flags: { remove?: boolean }): Promise<ConfigSshResult> {
  const file = ctx.config.sshConfigFile;
  const current = existsSync(file) ? readFileSync(file, 'utf8') : '';
  if (flags.remove) {
    const next = withManagedBlock(current, null);
    if (next !== current) writeAtomic(file, next);
    return { file, hosts: [], key: null, removed: next !== current };
  }
  const target = await ctx.target();
  const key = ensureKey(ctx);
  const publicKey = readFileSync(`${key}.pub`, 'utf8').trim();
  const api = sdkFor(target);
  await api.call('addSshKey', { body: { publicKey } });
  const workshops = (await api.call('listWorkshops')).items.filter((w) => w.status === 'Running' || w.status === 'Suspended');
  const knownHosts = join(sshDir(ctx), 'known_hosts');
  const known: string[] = [];
  const entries: string[] = [];
  // A context from ATELIER_URL/ATELIER_TOKEN is passed on through the environment ssh gives its ProxyCommand.
  const contextName = target.auth === 'env' ? null : target.context;
  for (const w of workshops) {
    const info = await api.call('workshopSsh', { params: { id: w.id } });
    known.push(`${info.hostAlias} ${info.hostKey}`);
    entries.push(
      [
        `Host ${info.hostAlias}`,
        `  HostName ${info.hostAlias}`,
        '  User atelier',
        `  ProxyCommand ${proxyCommand(ctx, contextName, w.id)}`,
        `  IdentityFile ${q(key)}`,
        '  IdentitiesOnly yes',
        '  PreferredAuthentications publickey',
        `  UserKnownHostsFile ${q(knownHosts)}`,
        '  StrictHostKeyChecking yes',
        `  HostKeyAlias ${info.hostAlias}`,
        '  ServerAliveInterval 15',
        '  ServerAliveCountMax 4',
      ].join('\n'),
    );
  }
  writeAtomic(knownHosts, known.length > 0 ? `${known.join('\n')}\n` : '');
  const block = [BEGIN, `# context: ${target.context}; workshops: ${workshops.length}`, ...entries, END].join('\n');
  const next = withManagedBlock(current, block);
  if (next !== current) writeAtomic(file, next);
  return { file, hosts: workshops.map((w) => `atelier-${w.id}`), key, removed: false };
}
