import { loadYaml } from '../core/index.js';
/** Output formats every command supports: `--output table|json|yaml`. */
export type OutputFormat = 'table' | 'json' | 'yaml';

export interface Column<T> {
  header: string;
  get: (row: T) => string;
}

export function table<T>(rows: T[], columns: Column<T>[]): string {
  const cells = [columns.map((c) => c.header), ...rows.map((r) => columns.map((c) => c.get(r)))];
  const widths = columns.map((_, i) => Math.max(...cells.map((row) => row[i]!.length)));
  return cells.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ')).join('\n');
}

/** Text from the network (agent-written, hostile), safe to print on a terminal: control characters (escape sequences) shown as \uXXXX. */
export function printable(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function keyValues(pairs: [string, string][]): string {
  const w = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(w + 1)} ${v}`).join('\n');
}

/** Prints `data` as JSON or YAML, or the given human rendering for tables. */
export async function render(format: OutputFormat, data: unknown, human: () => string): Promise<void> {
  if (format === 'json') process.stdout.write(`${JSON.stringify(data, null, 2)}\n`);
  else if (format === 'yaml') {
    const { stringify } = await loadYaml();
    process.stdout.write(stringify(data));
  } else {
    const text = human();
    if (text) process.stdout.write(`${text}\n`);
  }
}
