import { z } from 'zod';
import { keyEditAction } from './configEdit.js';

const Entry = z.strictObject({
  entry: z
    .string()
    .min(1)
    .max(300)
    .regex(/^[A-Za-z0-9*.:[\]-]+$/, 'an egress entry is a host name, *.suffix or host:port'),
});
type EntryParams = z.infer<typeof Entry>;

const help = [
  { name: 'entry', type: 'string', required: true, description: 'a host (api.stripe.com), *.suffix or host:port (api.example.com:8443)' },
];

function list(current: unknown): string[] | string {
  if (current === undefined || current === null) return [];
  if (!Array.isArray(current) || current.some((x) => typeof x !== 'string'))
    return 'egress.allow in atelier.yaml is not a list of strings: fix it by hand first';
  return current as string[];
}

function checkEgress(
  env: Parameters<NonNullable<Parameters<typeof keyEditAction>[0]['check']>>[0],
  settings: Record<string, unknown>,
): void {
  const egress = (settings.egress ?? {}) as { allow?: unknown; deny?: unknown };
  const allow = Array.isArray(egress.allow) ? (egress.allow as string[]) : [];
  const deny = Array.isArray(egress.deny) ? (egress.deny as string[]) : [];
  env.validateEgress(allow, deny);
}

/** One entry added to (`allow`) or removed from (`remove`) the project's egress allowlist. */
function egressEdit(op: 'allow' | 'remove', title: string) {
  return keyEditAction<EntryParams>({
    id: `egress.${op}`,
    title,
    path: ['egress', 'allow'],
    parameters: Entry,
    parameterHelp: help,
    compute(current, { entry }) {
      const l = list(current);
      if (typeof l === 'string') return l;
      if (op === 'allow') return l.includes(entry) ? `${entry} is already in egress.allow` : { value: [...l, entry] };
      return l.includes(entry) ? { value: l.filter((x) => x !== entry) } : `${entry} is not in egress.allow`;
    },
    check: checkEgress,
    inverseDescription: 'restore atelier.yaml to its exact prior bytes',
  });
}

/** `egress.allow`: adds one entry to the project's egress allowlist. */
export const egressAllow = egressEdit('allow', 'allow one more host in the egress allowlist of atelier.yaml');
/** `egress.remove`: removes one entry from the project's egress allowlist. */
export const egressRemove = egressEdit('remove', 'remove one host from the egress allowlist of atelier.yaml');
