import { readFileSync } from 'node:fs';
import { AtelierError, loadYaml, type CredentialPolicyView } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { printable, table } from '../../output.js';

export interface SecretInfo {
  name: string;
  setBy: string;
  setAt: string;
}

/**
 * The value, from stdin only (never an argument: it would sit in the shell's history and in
 * `ps`). On a terminal it is typed without echo and ends at Enter; piped, it is the whole input
 * less one final newline (`echo`, `printf '%s\n'`).
 */
export async function readValue(stdin: NodeJS.ReadStream = process.stdin): Promise<string> {
  if (stdin.isTTY) {
    process.stderr.write('value (not shown, Enter to finish): ');
    stdin.setRawMode(true);
    stdin.resume();
    const value = await new Promise<string>((resolve, reject) => {
      let buf = '';
      const onData = (chunk: Buffer): void => {
        for (const ch of chunk.toString('utf8')) {
          if (ch === '\r' || ch === '\n') return done(null);
          if (ch === '\u0003' || ch === '\u0004') return done(new AtelierError('INVALID_ARGUMENT', 'cancelled: nothing was set'));
          if (ch === '\u007f' || ch === '\b') buf = buf.slice(0, -1);
          else buf += ch;
        }
      };
      const done = (err: Error | null): void => {
        stdin.off('data', onData);
        stdin.setRawMode(false);
        stdin.pause();
        process.stderr.write('\n');
        if (err) reject(err);
        else resolve(buf);
      };
      stdin.on('data', onData);
    });
    return value;
  }
  const chunks: Buffer[] = [];
  for await (const c of stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
}

export async function setSecret(ctx: CommandContext, name: string, value: string): Promise<SecretInfo> {
  if (value.length === 0)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `no value on stdin: run \`printf %s "$VALUE" | atelier secrets set ${name}\` or type it at the prompt`,
      {
        field: 'value',
      },
    );
  return (await ctx.api()).call('setSecret', { params: { name }, body: { value } });
}

export async function listSecrets(ctx: CommandContext): Promise<SecretInfo[]> {
  return (await (await ctx.api()).call('listSecrets')).items;
}

export async function deleteSecret(ctx: CommandContext, name: string): Promise<void> {
  await (await ctx.api()).call('deleteSecret', { params: { name } });
}

export async function revokeGrant(ctx: CommandContext, id: string): Promise<void> {
  await (await ctx.api()).call('revokeSecretGrant', { params: { id } });
}

export function secretTable(items: SecretInfo[]): string {
  if (items.length === 0) return 'no secrets: a maintainer sets one with `atelier secrets set NAME` (value on stdin)';
  return table(items, [
    { header: 'NAME', get: (s) => s.name },
    { header: 'SET BY', get: (s) => s.setBy },
    { header: 'SET AT', get: (s) => s.setAt },
  ]);
}

/**
 * The tenant's credential policy from a YAML or JSON file (`-`: stdin), as the server takes it:
 * `credentials:` (atelier.yaml's `egress.credentials` form) and `forbid:` (hosts).
 */
export async function setPolicy(ctx: CommandContext, file: string): Promise<CredentialPolicyView> {
  let text: string;
  try {
    text = file === '-' ? await readValue(process.stdin) : readFileSync(file, 'utf8');
  } catch (err) {
    throw new AtelierError('INVALID_ARGUMENT', `cannot read ${file}: ${(err as Error).message}`, { field: 'file' });
  }
  let body: unknown;
  try {
    body = (await loadYaml()).parse(text) ?? {};
  } catch (err) {
    throw new AtelierError('INVALID_ARGUMENT', `${file} is not YAML or JSON: ${(err as Error).message.split('\n')[0]}`, { field: 'file' });
  }
  return (await ctx.api()).call('setCredentialPolicy', { body: body as CredentialPolicyView });
}

export async function showPolicy(ctx: CommandContext): Promise<CredentialPolicyView> {
  return (await ctx.api()).call('getCredentialPolicy');
}

export function policyText(p: CredentialPolicyView): string {
  const lines = [
    `credential policy of tenant ${printable(p.tenant)}${p.setBy ? ` (set by ${printable(p.setBy)} at ${p.setAt})` : ' (none set)'}`,
  ];
  lines.push('bound for every new workshop:');
  if (p.credentials.length === 0) lines.push('  (nothing)');
  for (const c of p.credentials) lines.push(`  ${printable(c.host)}  ${printable(c.header)}: ${printable(c.value)}`);
  lines.push('no binding may name:');
  lines.push(p.forbid.length === 0 ? '  (no host)' : p.forbid.map((h) => `  ${printable(h)}`).join('\n'));
  return lines.join('\n');
}
