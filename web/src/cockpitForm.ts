// The cockpit's pure logic (no React): how a parameter is typed in, what the form sends, where the
// server's refusal of a parameter is shown, and whether an action is applied from the page.
import { ApiError, type CatalogItem, type CockpitWrites } from './api.js';

export type Parameter = CatalogItem['parameters'][number];

/** How a parameter is typed in, from the type its catalog entry declares (`redis|valkey`, `JSON list`, `string`). */
export type InputKind = { kind: 'select'; options: string[] } | { kind: 'json' } | { kind: 'text' };

export function inputKind(type: string): InputKind {
  if (/^[\w.-]+(\|[\w.-]+)+$/.test(type)) return { kind: 'select', options: type.split('|') };
  // A single-value enumeration (one stack in the kit) is still a choice, not free text.
  if (/^[\w.-]+$/.test(type) && type !== 'string') return { kind: 'select', options: [type] };
  if (/^JSON\b/.test(type)) return { kind: 'json' };
  return { kind: 'text' };
}

/**
 * The parameters the form sends, or what is wrong before anything is sent: a required value left
 * empty, JSON that does not parse. Everything else (patterns, ranges, names) is the action's
 * schema's to check, on the server, whose message is shown at the field (`fieldOf`).
 */
export function formParameters(
  params: readonly Parameter[],
  raw: Readonly<Record<string, string>>,
): { parameters: Record<string, unknown>; errors: Record<string, string> } {
  const parameters: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  for (const p of params) {
    const value = raw[p.name] ?? '';
    if (value.trim() === '') {
      if (p.required) errors[p.name] = `${p.name} is required`;
      continue;
    }
    if (inputKind(p.type).kind === 'json') {
      try {
        parameters[p.name] = JSON.parse(value) as unknown;
      } catch (err) {
        errors[p.name] = `${p.name}: not valid JSON (${err instanceof Error ? err.message : String(err)})`;
      }
    } else parameters[p.name] = value;
  }
  return { parameters, errors };
}

/** The parameter a refusal of the server names (`details.field` is `parameters.NAME`), if it is one of the form's. */
export function fieldOf(err: unknown, params: readonly Parameter[]): string | undefined {
  if (!(err instanceof ApiError) || err.code !== 'INVALID_ARGUMENT') return undefined;
  const field = err.details.field;
  if (typeof field !== 'string' || !field.startsWith('parameters.')) return undefined;
  const name = field.slice('parameters.'.length).split('.')[0];
  return params.some((p) => p.name === name) ? name : undefined;
}

/**
 * Whether the page applies an action or shows the command to copy: class C is never run by the
 * server (its plan is the command), and while the write guard is off (`copy-command`, the
 * server's default) every action is applied from a terminal.
 */
export function copyMode(actionClass: CatalogItem['class'], writes: CockpitWrites): boolean {
  return actionClass === 'C' || writes === 'copy-command';
}

/** The CLI command that plans an action with these parameters (what a page that may not plan offers to copy). */
export function planCommand(actionId: string, project: string, parameters: Readonly<Record<string, unknown>>): string {
  const words = ['atelier', 'actions', 'plan', actionId, '--project', project];
  for (const [k, v] of Object.entries(parameters)) words.push('--param', `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return words.map(shellQuote).join(' ');
}

/** A word as a POSIX shell reads it: left bare when it is plain, else single-quoted. */
export function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}
