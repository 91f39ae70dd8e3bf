import { parse } from 'yaml';

/** What a redacted value reads as, everywhere a viewer can look. */
export const REDACTED = '(redacted)';

/** Env values are journaled by name only; any other secret-looking value never reaches the journal. */
export function redact(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.map((v) => redact(v));
  if (typeof value === 'object' && value !== null) {
    if (key === 'env') return Object.fromEntries(Object.keys(value).map((k) => [k, REDACTED]));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v, k)]));
  }
  return value;
}

/** The secrets `redact` hides: the values of every `env` mapping, and their names. */
export interface Secrets {
  values: Set<string>;
  keys: Set<string>;
}

/** Below this length a value is hidden only where it stands after its own name (`NAME: v`), never by its text alone. */
const MIN_TEXT_MATCH = 4;

/** Collects the secrets of `value` (parameters, or a parsed atelier.yaml) into `into`. */
export function secretsOf(value: unknown, into: Secrets = { values: new Set(), keys: new Set() }, key = ''): Secrets {
  if (Array.isArray(value)) for (const v of value) secretsOf(v, into);
  else if (typeof value === 'object' && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (key === 'env') {
        into.keys.add(k);
        if (v !== null && v !== undefined && typeof v !== 'object') into.values.add(String(v));
      } else secretsOf(v, into, k);
    }
  }
  return into;
}

/** The secrets of a YAML text (an atelier.yaml before or after an edit); none when it does not parse. */
export function secretsOfYaml(text: string | null, into?: Secrets): Secrets {
  let doc: unknown;
  try {
    doc = text === null ? undefined : parse(text);
  } catch {
    doc = undefined;
  }
  return secretsOf(doc, into);
}

function escapeRegExp(s: string): string {
  return s.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');
}

/**
 * A text with its secrets hidden: each line `NAME: value` / `NAME=value` whose NAME is a secret's
 * name (a diff's `+`/`-`/` ` prefix and a list's `- ` allowed) keeps its name only; then every
 * occurrence of a secret value of 4 characters or more (each line of a multi-line one, its JSON-
 * and YAML-escaped spellings too) becomes `(redacted)`.
 */
export function scrubText(text: string, secrets: Secrets): string {
  if (secrets.values.size === 0 && secrets.keys.size === 0) return text;
  let out = text;
  if (secrets.keys.size > 0) {
    const names = [...secrets.keys].map(escapeRegExp).join('|');
    const line = new RegExp(`^([ +-]?[ \\t]*(?:-[ \\t]+)?)(["']?)(${names})\\2([ \\t]*[:=][ \\t]*)(?![|>][-+0-9]*[ \\t]*$)(\\S.*)$`, 'gm');
    out = out.replace(line, (_m, lead: string, q: string, name: string, sep: string) => `${lead}${q}${name}${q}${sep}${REDACTED}`);
  }
  const pieces = new Set<string>();
  for (const v of secrets.values) {
    for (const piece of [v, ...v.split('\n').map((l) => l.trim())]) {
      if (piece.length < MIN_TEXT_MATCH) continue;
      pieces.add(piece);
      pieces.add(JSON.stringify(piece).slice(1, -1));
      pieces.add(piece.replace(/'/g, "''"));
    }
  }
  // Longest first: a secret that contains another is hidden whole.
  for (const piece of [...pieces].sort((a, b) => b.length - a.length)) out = out.split(piece).join(REDACTED);
  return out;
}

/**
 * Fields never rewritten: digests and ids (a short secret could happen to be part of one) and a
 * journal line's inverse, which rollback reads back (it holds paths and digests, no value).
 */
const VERBATIM = /(?:Sha256|Id|^fingerprint|^inverse|^at)$/;

/** `value` with `scrubText` applied to every string in it (keys, digests, ids and inverses kept). */
export function scrub<T>(value: T, secrets: Secrets): T {
  if (secrets.values.size === 0 && secrets.keys.size === 0) return value;
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return scrubText(v, secrets);
    if (Array.isArray(v)) return v.map(walk);
    if (typeof v === 'object' && v !== null)
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, VERBATIM.test(k) ? x : walk(x)]));
    return v;
  };
  return walk(value) as T;
}
