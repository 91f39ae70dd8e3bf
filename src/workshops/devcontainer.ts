import { lstatSync, readFileSync, realpathSync } from 'node:fs';
import { join, normalize, sep } from 'node:path';
import { parse, printParseErrorCode, type ParseError } from 'jsonc-parser';
import { AtelierError } from '../core/index.js';

/** What the local driver takes from devcontainer.json; every other key becomes a warning. */
export interface DevcontainerSettings {
  path: string | null;
  env: Record<string, string>;
  /** Lifecycle commands in order (onCreate, updateContent, postCreate): argv or a shell line. */
  createCommands: { key: string; command: string[] }[];
  forwardPorts: number[];
  warnings: string[];
}

const HONOURED = new Set([
  'name',
  'containerEnv',
  'remoteEnv',
  'onCreateCommand',
  'updateContentCommand',
  'postCreateCommand',
  'forwardPorts',
  'remoteUser',
  'containerUser',
  'workspaceFolder',
  '$schema',
]);

function commandList(key: string, value: unknown): { key: string; command: string[] }[] {
  if (typeof value === 'string') return value.trim() ? [{ key, command: ['/bin/sh', '-c', value] }] : [];
  if (Array.isArray(value) && value.every((v) => typeof v === 'string') && value.length > 0) return [{ key, command: value as string[] }];
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    return Object.entries(value).flatMap(([name, v]) => commandList(`${key}.${name}`, v));
  }
  throw new AtelierError('INVALID_ARGUMENT', `devcontainer.json: ${key} must be a string, an array of strings or an object of those`, {
    field: key,
  });
}

function stringMap(key: string, value: unknown, known: Record<string, string>, warnings: string[]): Record<string, string> {
  if (value === undefined) return {};
  if (!value || typeof value !== 'object' || Array.isArray(value))
    throw new AtelierError('INVALID_ARGUMENT', `devcontainer.json: ${key} must be an object of strings`, { field: key });
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || typeof v !== 'string')
      throw new AtelierError('INVALID_ARGUMENT', `devcontainer.json: ${key}.${k} must be a string with a valid variable name`, {
        field: `${key}.${k}`,
      });
    // ${containerEnv:X} is resolved; ${localEnv:X} would copy the server's environment in, so it is dropped.
    out[k] = v.replace(
      /\$\{(containerEnv|localEnv|containerWorkspaceFolder)(?::([A-Za-z_][A-Za-z0-9_]*))?\}/g,
      (_m, kind: string, name?: string) => {
        if (kind === 'containerWorkspaceFolder') return '/workspace';
        if (kind === 'containerEnv' && name) return known[name] ?? '';
        warnings.push(
          `devcontainer.json: \${localEnv:${name ?? ''}} in ${key}.${k} is not expanded (the server's environment never enters a workshop)`,
        );
        return '';
      },
    );
  }
  return out;
}

/**
 * Reads devcontainer.json (JSON with comments) from the cloned workspace. `explicit` is a path
 * inside the repository; without it the usual locations are tried. The file must resolve inside
 * the workspace: a symlink pointing elsewhere is refused (the server reads it, not the agent).
 */
export function readDevcontainer(
  workspace: string,
  explicit: string | undefined,
  baseEnv: Record<string, string> = {},
): DevcontainerSettings {
  const empty: DevcontainerSettings = { path: null, env: {}, createCommands: [], forwardPorts: [], warnings: [] };
  const candidates = explicit ? [explicit] : ['.devcontainer/devcontainer.json', '.devcontainer.json'];
  for (const rel of candidates) {
    const clean = normalize(rel.replace(/^\/+/, ''));
    if (clean.startsWith('..'))
      throw new AtelierError('INVALID_ARGUMENT', `--devcontainer ${rel} must be a path inside the repository`, { field: 'devcontainer' });
    const full = join(workspace, clean);
    let real: string;
    try {
      lstatSync(full);
      real = realpathSync(full);
    } catch {
      if (explicit)
        throw new AtelierError('INVALID_ARGUMENT', `--devcontainer ${rel} does not exist in the repository`, { field: 'devcontainer' });
      continue;
    }
    const ws = realpathSync(workspace);
    if (!real.startsWith(ws + sep))
      throw new AtelierError('INVALID_ARGUMENT', `devcontainer file ${rel} points outside the repository`, { field: 'devcontainer' });
    if (lstatSync(real).size > 1 << 20)
      throw new AtelierError('INVALID_ARGUMENT', `devcontainer file ${rel} is larger than 1 MiB`, { field: 'devcontainer' });
    const errors: ParseError[] = [];
    const doc: unknown = parse(readFileSync(real, 'utf8'), errors, { allowTrailingComma: true });
    if (errors.length > 0 || !doc || typeof doc !== 'object' || Array.isArray(doc)) {
      const first = errors[0];
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `devcontainer file ${rel} is not valid JSON with comments${first ? ` (${printParseErrorCode(first.error)} at offset ${first.offset})` : ''}`,
        { field: 'devcontainer' },
      );
    }
    const d = doc as Record<string, unknown>;
    const warnings: string[] = [];
    for (const key of Object.keys(d)) {
      if (!HONOURED.has(key)) warnings.push(`devcontainer.json: "${key}" is not supported by the local driver and was ignored`);
    }
    // ${containerEnv:PATH} and friends refer to the workshop's own defaults.
    const containerEnv = stringMap('containerEnv', d.containerEnv, baseEnv, warnings);
    const remoteEnv = stringMap('remoteEnv', d.remoteEnv, { ...baseEnv, ...containerEnv }, warnings);
    const createCommands = ['onCreateCommand', 'updateContentCommand', 'postCreateCommand'].flatMap((k) =>
      d[k] === undefined ? [] : commandList(k, d[k]),
    );
    const forwardPorts: number[] = [];
    if (d.forwardPorts !== undefined) {
      if (!Array.isArray(d.forwardPorts))
        throw new AtelierError('INVALID_ARGUMENT', 'devcontainer.json: forwardPorts must be an array', { field: 'forwardPorts' });
      for (const p of d.forwardPorts) {
        const port = typeof p === 'number' ? p : typeof p === 'string' ? Number(p.split(':').pop()) : NaN;
        if (!Number.isInteger(port) || port < 1 || port > 65535)
          throw new AtelierError('INVALID_ARGUMENT', `devcontainer.json: forwardPorts entry ${JSON.stringify(p)} is not a port`, {
            field: 'forwardPorts',
          });
        forwardPorts.push(port);
      }
    }
    return { path: clean, env: { ...containerEnv, ...remoteEnv }, createCommands, forwardPorts, warnings };
  }
  return empty;
}
