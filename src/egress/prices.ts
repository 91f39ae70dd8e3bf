// The price table the LLM gateway (gateway.ts) prices usage with: USD per million tokens, by
// model name. The admin's table (ATELIER_LLM_GATEWAY `prices:`) is laid over this one.
import { z } from 'zod';

export interface ModelPrice {
  /** USD per million input tokens (cache writes and reads included, at this rate). */
  input: number;
  /** USD per million output tokens. */
  output: number;
}

/** A model name, or `*`: what a model no other entry names costs. */
export type PriceTable = Readonly<Record<string, ModelPrice>>;

/**
 * List prices when this table was written. An entry matches a model whose name it begins (the
 * longest such entry wins: `claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`). `*` prices any
 * other model as the dearest listed, so a name the table does not know cannot pass a budget unseen.
 */
export const DEFAULT_PRICES: PriceTable = {
  'claude-opus-4-5': { input: 5, output: 25 },
  'claude-opus-4': { input: 15, output: 75 },
  'claude-sonnet-4': { input: 3, output: 15 },
  'claude-3-7-sonnet': { input: 3, output: 15 },
  'claude-3-5-sonnet': { input: 3, output: 15 },
  'claude-haiku-4-5': { input: 1, output: 5 },
  'claude-3-5-haiku': { input: 0.8, output: 4 },
  'claude-3-haiku': { input: 0.25, output: 1.25 },
  'gpt-5-nano': { input: 0.05, output: 0.4 },
  'gpt-5-mini': { input: 0.25, output: 2 },
  'gpt-5': { input: 1.25, output: 10 },
  'gpt-4.1-nano': { input: 0.1, output: 0.4 },
  'gpt-4.1-mini': { input: 0.4, output: 1.6 },
  'gpt-4.1': { input: 2, output: 8 },
  'gpt-4o-mini': { input: 0.15, output: 0.6 },
  'gpt-4o': { input: 2.5, output: 10 },
  'o4-mini': { input: 1.1, output: 4.4 },
  o3: { input: 2, output: 8 },
  '*': { input: 15, output: 75 },
};

const Price = z.strictObject({ input: z.number().nonnegative().max(10_000), output: z.number().nonnegative().max(10_000) });
export const PriceTableSchema = z.record(z.string().min(1).max(200), Price);

/** What `model` costs per million tokens, and the entry that priced it. */
export function priceOf(table: PriceTable, model: string | undefined): { entry: string; price: ModelPrice } {
  let best: string | undefined;
  if (model !== undefined)
    for (const k of Object.keys(table)) if (k !== '*' && model.startsWith(k) && (best === undefined || k.length > best.length)) best = k;
  const entry = best ?? '*';
  return { entry, price: table[entry] ?? DEFAULT_PRICES['*']! };
}

/** USD for the tokens at `price`. */
export function costOf(price: ModelPrice, inputTokens: number, outputTokens: number): number {
  return (inputTokens * price.input + outputTokens * price.output) / 1_000_000;
}
