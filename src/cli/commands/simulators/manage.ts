import { AtelierError, SIMULATOR_OPTIONS, type SimulatorRequest, type SimulatorView } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { table } from '../../output.js';

export type { SimulatorView };

/**
 * `--simulator TYPE[:ARG]` of `workshops create`: `postgres`, `postgres:15` (a version),
 * `wiremock:./tests/mocks` (wiremock's ARG is its stubs directory in the repository).
 */
export function parseSimulatorFlag(value: string): SimulatorRequest {
  const m = /^([a-z][a-z0-9-]*)(?::(.+))?$/.exec(value);
  if (!m)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `--simulator ${JSON.stringify(value)}: use TYPE or TYPE:VERSION (wiremock: TYPE:STUBS_DIR), e.g. postgres:15`,
      {
        field: 'simulator',
      },
    );
  const [, type, arg] = m;
  if (arg === undefined) return { type };
  return type === 'wiremock' ? { type, stubsDirectory: arg } : { type, version: arg };
}

/** KEY=VALUE pairs of a repeated flag. */
function pairs(flag: string, values: string[] | undefined): Record<string, string> | undefined {
  if (!values || values.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const v of values) {
    const i = v.indexOf('=');
    if (i <= 0) throw new AtelierError('INVALID_ARGUMENT', `--${flag} ${JSON.stringify(v)}: use KEY=VALUE`, { field: flag });
    out[v.slice(0, i)] = v.slice(i + 1);
  }
  return out;
}

/**
 * `--option key=value` pairs, each value read as the catalog says the option of this type is:
 * `superuser=true` is the boolean true, not the text. An option the catalog does not list
 * goes as its text (the server then refuses it, naming the options there are).
 */
function readOptions(type: string, values: string[] | undefined): Record<string, unknown> | undefined {
  const texts = pairs('option', values);
  if (!texts) return undefined;
  const out: Record<string, unknown> = {};
  for (const [key, text] of Object.entries(texts)) {
    if (SIMULATOR_OPTIONS[type]?.[key] !== 'boolean') {
      out[key] = text;
    } else if (text === 'true' || text === 'false') {
      out[key] = text === 'true';
    } else {
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `--option ${key}=${text}: ${key} of a ${type} simulator is true or false, e.g. --option ${key}=true`,
        { field: `options.${key}` },
      );
    }
  }
  return out;
}

export async function listSimulators(ctx: CommandContext, id: string): Promise<SimulatorView[]> {
  return (await (await ctx.api()).call('listSimulators', { params: { id } })).items;
}

export interface RequestFlags {
  name?: string;
  version?: string;
  env?: string[];
  option?: string[];
  services?: string;
  stubs?: string;
}

/** `atelier simulators request ID TYPE`: starts one more simulator in a running workshop. */
export async function requestSimulator(ctx: CommandContext, id: string, type: string, flags: RequestFlags): Promise<SimulatorView> {
  const body: SimulatorRequest = { type };
  if (flags.name !== undefined) body.name = flags.name;
  if (flags.version !== undefined) body.version = flags.version;
  const env = pairs('env', flags.env);
  if (env) body.env = env;
  const options = readOptions(type, flags.option);
  if (options) body.options = options;
  if (flags.services !== undefined)
    body.services = flags.services
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  if (flags.stubs !== undefined) body.stubsDirectory = flags.stubs;
  return (await ctx.api()).call('requestSimulator', { params: { id }, body });
}

export async function resetSimulator(ctx: CommandContext, id: string, name: string): Promise<SimulatorView> {
  return (await ctx.api()).call('resetSimulator', { params: { id, name } });
}

export async function stopSimulator(ctx: CommandContext, id: string, name: string): Promise<SimulatorView> {
  return (await ctx.api()).call('stopSimulator', { params: { id, name } });
}

export async function simulatorLogs(ctx: CommandContext, id: string, name: string, tail?: string): Promise<string> {
  const logs = await (await ctx.api()).bytes('simulatorLogs', { params: { id, name }, query: { tail } });
  return logs.toString('utf8');
}

function size(bytes: number | null): string {
  if (bytes === null) return '-';
  return bytes >= 1 << 20 ? `${(bytes / 2 ** 20).toFixed(1)} MiB` : `${Math.round(bytes / 1024)} KiB`;
}

export function simulatorTable(items: SimulatorView[]): string {
  if (items.length === 0) return 'No simulators: declare them in atelier.yaml (simulators:) or run `atelier simulators request ID TYPE`.';
  return table(items, [
    { header: 'NAME', get: (s) => s.name },
    { header: 'TYPE', get: (s) => s.type },
    { header: 'VERSION', get: (s) => s.version ?? '-' },
    { header: 'STATUS', get: (s) => s.status + (s.restarts > 0 ? ` (${s.restarts} restart${s.restarts > 1 ? 's' : ''})` : '') },
    { header: 'ENDPOINT', get: (s) => (s.endpoint ? `${s.endpoint.host}:${s.endpoint.port}` : '-') },
    { header: 'MEMORY', get: (s) => size(s.memoryBytes) },
    { header: 'REASON', get: (s) => s.statusReason ?? '' },
  ]);
}

export function simulatorDetail(s: SimulatorView): string {
  const lines = [`${s.name} (${s.type}${s.version ? ` ${s.version}` : ''}): ${s.status}${s.statusReason ? ` — ${s.statusReason}` : ''}`];
  if (s.endpoint) lines.push(`  endpoint: ${s.endpoint.host}:${s.endpoint.port}`);
  for (const [k, v] of Object.entries(s.env)) lines.push(`  ${k}=${v}`);
  return lines.join('\n');
}
