import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { applyEdits, modify, parse, printParseErrorCode, type ParseError } from 'jsonc-parser';
import { AtelierError, readClientConfig, writeFileAtomic } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';

export const MCP_CLIENTS = ['claude-desktop', 'claude-code', 'cursor', 'vscode', 'windsurf'] as const;
export type McpClient = (typeof MCP_CLIENTS)[number];

interface ClientFormat {
  label: string;
  /** The key of the object that maps server names to their entries. */
  key: 'mcpServers' | 'servers';
  /** VS Code reads mcp.json as JSONC (comments, trailing commas); the others want plain JSON. */
  jsonc: boolean;
  /** The entry carries `"type": "stdio"` (VS Code and Claude Code spell it out). */
  typed: boolean;
}

const FORMATS: Record<McpClient, ClientFormat> = {
  'claude-desktop': { label: 'Claude Desktop', key: 'mcpServers', jsonc: false, typed: false },
  'claude-code': { label: 'Claude Code', key: 'mcpServers', jsonc: false, typed: true },
  cursor: { label: 'Cursor', key: 'mcpServers', jsonc: false, typed: false },
  vscode: { label: 'VS Code', key: 'servers', jsonc: true, typed: true },
  windsurf: { label: 'Windsurf', key: 'mcpServers', jsonc: false, typed: false },
};

/**
 * Where each client reads its own (user-level) MCP configuration, per OS, as each documents it.
 * On Windows %APPDATA% is taken at its default place, <home>\AppData\Roaming.
 */
export function clientConfigPath(client: McpClient, platform: NodeJS.Platform = process.platform, home: string = homedir()): string {
  const appData =
    platform === 'darwin'
      ? join(home, 'Library', 'Application Support')
      : platform === 'win32'
        ? join(home, 'AppData', 'Roaming')
        : join(home, '.config');
  switch (client) {
    case 'claude-desktop':
      return join(appData, 'Claude', 'claude_desktop_config.json');
    case 'claude-code':
      return join(home, '.claude.json');
    case 'cursor':
      return join(home, '.cursor', 'mcp.json');
    case 'vscode':
      return join(appData, 'Code', 'User', 'mcp.json');
    case 'windsurf':
      return join(home, '.codeium', 'windsurf', 'mcp_config.json');
  }
}

export interface InstallFlags {
  client?: string;
  remove?: boolean;
  dryRun?: boolean;
}

export interface InstallResult {
  client: McpClient;
  path: string;
  server: string;
  /** added, updated, unchanged, removed, absent (nothing to remove). */
  action: 'added' | 'updated' | 'unchanged' | 'removed' | 'absent';
  /** The previous content, kept beside the file (null when nothing was written or there was no file). */
  backup: string | null;
  dryRun: boolean;
  /** Unified diff of the change (empty when none). */
  diff: string;
}

/** A unified diff of two texts: one hunk around the lines that differ (edits here are local). */
export function unifiedDiff(path: string, before: string, after: string): string {
  if (before === after) return '';
  const a = before === '' ? [] : before.replace(/\n$/, '').split('\n');
  const b = after === '' ? [] : after.replace(/\n$/, '').split('\n');
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const from = Math.max(0, start - 3);
  const toA = Math.min(a.length, endA + 3);
  const toB = Math.min(b.length, endB + 3);
  const lines = [
    `--- ${before === '' ? '/dev/null' : path}`,
    `+++ ${path}`,
    `@@ -${a.length ? from + 1 : 0},${toA - from} +${b.length ? from + 1 : 0},${toB - from} @@`,
    ...a.slice(from, start).map((l) => ` ${l}`),
    ...a.slice(start, endA).map((l) => `-${l}`),
    ...b.slice(start, endB).map((l) => `+${l}`),
    ...a.slice(endA, toA).map((l) => ` ${l}`),
  ];
  return `${lines.join('\n')}\n`;
}

/** The change to one client's file: computed, then written (or only shown with dryRun). */
export function applyClientConfig(
  client: McpClient,
  path: string,
  context: string,
  opts: { remove: boolean; dryRun: boolean },
): InstallResult {
  const format = FORMATS[client];
  const server = `atelier-${context}`;
  const exists = existsSync(path);
  const before = exists ? readFileSync(path, 'utf8') : '';
  const errors: ParseError[] = [];
  const doc: unknown =
    before.trim() === '' ? {} : parse(before, errors, { allowTrailingComma: format.jsonc, disallowComments: !format.jsonc });
  if (errors.length > 0) {
    const e = errors[0]!;
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `${path} is not valid ${format.jsonc ? 'JSONC' : 'JSON'} (${printParseErrorCode(e.error)} at offset ${e.offset}); ${format.label} could not read it either: fix it or move it away, then run this again (nothing was changed)`,
      { path },
    );
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw new AtelierError('INVALID_ARGUMENT', `${path} does not hold a JSON object: fix it or move it away (nothing was changed)`, {
      path,
    });
  const servers = (doc as Record<string, unknown>)[format.key];
  if (servers !== undefined && (typeof servers !== 'object' || servers === null || Array.isArray(servers)))
    throw new AtelierError('INVALID_ARGUMENT', `"${format.key}" in ${path} is not an object: fix it (nothing was changed)`, { path });
  const current = (servers as Record<string, unknown> | undefined)?.[server];
  const entry = {
    ...(format.typed ? { type: 'stdio' } : {}),
    command: 'atelier',
    args: ['mcp', 'serve', '--context', context],
  };

  let after = before;
  let action: InstallResult['action'];
  const formattingOptions = { insertSpaces: true, tabSize: 2, eol: '\n' };
  if (opts.remove) {
    action = current === undefined ? 'absent' : 'removed';
    if (current !== undefined) after = applyEdits(before, modify(before, [format.key, server], undefined, { formattingOptions }));
  } else if (current !== undefined && JSON.stringify(current) === JSON.stringify(entry)) {
    action = 'unchanged';
  } else {
    action = current === undefined ? 'added' : 'updated';
    const base = before.trim() === '' ? '{}\n' : before;
    after = applyEdits(base, modify(base, [format.key, server], entry, { formattingOptions }));
    if (!after.endsWith('\n')) after += '\n';
  }
  const diff = unifiedDiff(path, before, after);
  let backup: string | null = null;
  if (!opts.dryRun && after !== before) {
    mkdirSync(dirname(path), { recursive: true });
    // The client's own file may hold secrets (env of other servers): keep its mode, else 0600.
    const mode = exists ? statSync(path).mode & 0o777 : 0o600;
    if (exists) {
      backup = `${path}.atelier-backup`;
      copyFileSync(path, backup);
      chmodSync(backup, mode);
    }
    writeFileAtomic(path, after, mode, { durable: true });
  }
  return { client, path, server, action, backup, dryRun: opts.dryRun, diff };
}

/** `atelier mcp install-config`: adds (or removes) this context's MCP server in each client's config. */
export async function installConfig(ctx: CommandContext, flags: InstallFlags): Promise<InstallResult[]> {
  const cc = await readClientConfig(ctx.config.configDir);
  const context = ctx.contextFlag ?? ctx.config.context ?? cc.currentContext;
  if (!context)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      'no context to install: add one with `atelier context add NAME --url URL` (or start a server here), or name it with --context',
    );
  if (!flags.remove && !cc.contexts.some((c) => c.name === context))
    throw new AtelierError(
      'NOT_FOUND',
      `context "${context}" does not exist: known contexts are ${cc.contexts.map((c) => c.name).join(', ') || '(none)'}`,
    );
  let clients: McpClient[];
  if (flags.client !== undefined) {
    if (!(MCP_CLIENTS as readonly string[]).includes(flags.client))
      throw new AtelierError('INVALID_ARGUMENT', `--client must be one of ${MCP_CLIENTS.join(', ')}`, { field: 'client' });
    clients = [flags.client as McpClient];
  } else {
    // Without --client: every client installed here (its configuration file or folder exists).
    clients = MCP_CLIENTS.filter((c) => {
      const p = clientConfigPath(c);
      return existsSync(p) || (c !== 'claude-code' && existsSync(dirname(p)));
    });
    if (clients.length === 0)
      throw new AtelierError('NOT_FOUND', `no MCP client found on this machine: name one with --client (${MCP_CLIENTS.join(', ')})`);
  }
  return clients.map((c) =>
    applyClientConfig(c, clientConfigPath(c), context, { remove: flags.remove ?? false, dryRun: flags.dryRun ?? false }),
  );
}

/** Human output: one line per client, and the diff with --dry-run. */
export function describeInstall(results: InstallResult[]): string {
  return results
    .map((r) => {
      const label = FORMATS[r.client].label;
      const what =
        r.action === 'unchanged'
          ? `already has ${r.server}`
          : r.action === 'absent'
            ? `has no ${r.server}`
            : `${r.dryRun ? 'would be ' : ''}${r.action} ${r.server}`;
      const line = `${label}: ${r.path} ${what}${r.backup ? ` (previous content in ${r.backup})` : ''}`;
      return r.dryRun && r.diff ? `${line}\n${r.diff}` : line;
    })
    .concat(results.some((r) => !r.dryRun && r.diff) ? ['restart (or reload the MCP servers of) the client to pick the change up'] : [])
    .join('\n');
}
