import { AtelierError } from '../../core/index.js';

/** One bad query parameter: its name and what it must be. */
export interface QueryProblem {
  field: string;
  message: string;
}

interface Bounds {
  min: number;
  max: number;
}

/**
 * The one query-string parser of every route (after coder/coder's `httpapi.QueryParamParser`):
 * typed getters read `request.query` (Fastify gives an array for a repeated parameter, which is
 * refused: every parameter is given once), each bad one is noted, and `done()` answers them all
 * in one 400 that names every field, so a caller fixes its URL in one go.
 */
export class QueryParams {
  readonly #query: Record<string, unknown>;
  readonly #problems: QueryProblem[] = [];

  constructor(query: unknown) {
    this.#query = query !== null && typeof query === 'object' ? (query as Record<string, unknown>) : {};
  }

  /** The text of `name`, or undefined when absent (an empty or repeated value is refused). */
  string(name: string): string | undefined {
    const v = this.#query[name];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || v === '') return this.#bad(name, 'must be given once, not empty');
    return v;
  }

  /** The text of `name`, which must be there. */
  requiredString(name: string): string {
    const v = this.#query[name];
    if (typeof v !== 'string' || v === '') return this.#bad(name, 'is required, once') ?? '';
    return v;
  }

  /** A whole number within bounds, or undefined when absent. */
  int(name: string, { min, max }: Bounds): number | undefined {
    const v = this.#query[name];
    if (v === undefined) return undefined;
    const n = typeof v === 'string' && /^\d{1,16}$/.test(v) ? Number(v) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) return this.#bad(name, `must be an integer from ${min} to ${max}, given once`);
    return n;
  }

  /** A non-negative decimal number (at most three decimals) within bounds, or undefined when absent. */
  number(name: string, { min, max }: Bounds): number | undefined {
    const v = this.#query[name];
    if (v === undefined) return undefined;
    const n = typeof v === 'string' && /^\d{1,16}(\.\d{1,3})?$/.test(v) ? Number(v) : NaN;
    if (!Number.isFinite(n) || n < min || n > max) return this.#bad(name, `must be a number from ${min} to ${max}, given once`);
    return n;
  }

  /** `true`/`1` or `false`/`0`, or undefined when absent. */
  boolean(name: string): boolean | undefined {
    const v = this.#query[name];
    if (v === undefined) return undefined;
    if (v === 'true' || v === '1') return true;
    if (v === 'false' || v === '0') return false;
    return this.#bad(name, 'must be true or false, given once');
  }

  /** One of the given values, or undefined when absent. */
  oneOf<const T extends string>(name: string, values: readonly T[]): T | undefined {
    const v = this.string(name);
    if (v === undefined) return undefined;
    if (!(values as readonly string[]).includes(v))
      return this.#bad(
        name,
        values.length === 1 ? `must be ${values[0]}` : `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}`,
      );
    return v as T;
  }

  /** Throws one INVALID_ARGUMENT naming every bad parameter (the first in `field`, all in `fields`). */
  done(): void {
    const first = this.#problems[0];
    if (!first) return;
    throw new AtelierError('INVALID_ARGUMENT', this.#problems.map((p) => `query parameter ${p.field} ${p.message}`).join('; '), {
      field: first.field,
      fields: this.#problems.map((p) => p.field),
    });
  }

  #bad(field: string, message: string): undefined {
    this.#problems.push({ field, message });
    return undefined;
  }
}

/** Starts reading a request's query string: call the getters, then `done()`. */
export function queryOf(query: unknown): QueryParams {
  return new QueryParams(query);
}
