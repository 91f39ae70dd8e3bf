/** Env values are journaled by name only; any other secret-looking value never reaches the journal. */
export function redact(value: unknown, key = ''): unknown {
  if (Array.isArray(value)) return value.map((v) => redact(v));
  if (typeof value === 'object' && value !== null) {
    if (key === 'env') return Object.fromEntries(Object.keys(value).map((k) => [k, '(redacted)']));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redact(v, k)]));
  }
  return value;
}
