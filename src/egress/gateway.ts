// The LLM gateway: the admin's model providers (ATELIER_LLM_GATEWAY), each a credential binding
// every workshop has (broker.ts adds the provider's key from the tenant's secret store), with a
// look at each request: a workshop whose LLM budget is spent is refused before anything leaves;
// every other model request is sent on, and the usage its answer reports (streamed or not) is
// read from a copy of the bytes as they pass (usage.ts), priced (prices.ts) and recorded.
import type http from 'node:http';
import { parse } from 'yaml';
import { z } from 'zod';
import type { BrokerHook, CredentialBinding, HookedRequest } from './broker.js';
import { canonicalizeHost } from './canonical.js';
import { costOf, DEFAULT_PRICES, priceOf, PriceTableSchema, type PriceTable } from './prices.js';
import { UsageReader, type ProviderFormat } from './usage.js';

export type ProviderKind = 'anthropic' | 'openai' | 'openai-compatible';

export interface LlmProvider {
  kind: ProviderKind;
  /** The API's base URL (https): its host and port are what workshops reach. */
  baseUrl: string;
  host: string;
  port: number;
  format: ProviderFormat;
  /** The tenant secret that holds the key. */
  secret: string;
  binding: CredentialBinding;
}

export interface GatewayConfig {
  providers: LlmProvider[];
  prices: PriceTable;
}

/** One model request as the gateway saw it. */
export interface LlmRequestRecord {
  provider: ProviderKind;
  model: string | null;
  /** The upstream's status; 0 when no answer came. */
  status: number;
  inputTokens: number;
  outputTokens: number;
  /** False: the answer reported no usage (counted, priced at 0). */
  usageReported: boolean;
  costUsd: number;
}

export interface LlmGatewayOptions extends GatewayConfig {
  /** The workshop's budget (null: none) and what it has spent so far. */
  budget(workshopId: string): Promise<{ budgetUsd: number | null; spentUsd: number } | undefined>;
  record(workshopId: string, r: LlmRequestRecord): Promise<void>;
  onError(workshopId: string, err: unknown): void;
}

const DEFAULT_BASE: Record<Exclude<ProviderKind, 'openai-compatible'>, string> = {
  anthropic: 'https://api.anthropic.com',
  openai: 'https://api.openai.com/v1',
};
/** The key variables' value inside workshops: not a key (the broker sets the real one on the way out). */
export const GATEWAY_PLACEHOLDER = 'atelier-llm-gateway';
const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** A model request's body is read whole (to learn its model, and to ask a stream for its usage): at most this. */
const MAX_REQUEST_BYTES = 64 << 20;

const ConfigSchema = z.strictObject({
  providers: z
    .array(
      z.strictObject({
        kind: z.enum(['anthropic', 'openai', 'openai-compatible']),
        key: z.string().regex(SECRET_NAME, 'a secret name: letters, digits and _, not starting with a digit'),
        baseUrl: z.string().max(500).optional(),
      }),
    )
    .max(20)
    .default([]),
  prices: PriceTableSchema.default({}),
});

/** Reads the gateway's file (YAML); throws an Error naming the field that is wrong. */
export function parseGatewayConfig(text: string, where: string): GatewayConfig {
  let raw: unknown;
  try {
    raw = parse(text) ?? {};
  } catch (err) {
    throw new Error(`${where}: not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const r = ConfigSchema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`${where}: ${i.path.join('.') || '(top)'}: ${i.message}`);
  }
  const providers: LlmProvider[] = [];
  r.data.providers.forEach((p, i) => {
    const at = `${where}: providers.${i}`;
    const base = p.baseUrl ?? (p.kind === 'openai-compatible' ? undefined : DEFAULT_BASE[p.kind]);
    if (base === undefined) throw new Error(`${at}.baseUrl: an openai-compatible provider needs its base URL (https://host[:port]/v1)`);
    let url: URL;
    try {
      url = new URL(base);
    } catch {
      throw new Error(`${at}.baseUrl: "${base.slice(0, 100)}" is not a URL`);
    }
    if (url.protocol !== 'https:' || url.username || url.password || url.search || url.hash)
      throw new Error(`${at}.baseUrl: write https://host[:port][/path], without credentials, query or fragment`);
    const h = canonicalizeHost(url.hostname);
    if (h.kind === 'refused') throw new Error(`${at}.baseUrl: ${h.message}`);
    const port = url.port ? Number(url.port) : 443;
    if (providers.some((q) => q.host === h.value && q.port === port))
      throw new Error(`${at}.baseUrl: ${h.value}:${port} is already another provider's`);
    const format: ProviderFormat = p.kind === 'anthropic' ? 'anthropic' : 'openai';
    providers.push({
      kind: p.kind,
      baseUrl: url.href.replace(/\/$/, ''),
      host: h.value,
      port,
      format,
      secret: p.key,
      binding:
        format === 'anthropic'
          ? { host: h.value, port, header: 'x-api-key', secret: p.key, prefix: '', suffix: '' }
          : { host: h.value, port, header: 'Authorization', secret: p.key, prefix: 'Bearer ', suffix: '' },
    });
  });
  return { providers, prices: { ...DEFAULT_PRICES, ...r.data.prices } };
}

function refusal(format: ProviderFormat, status: number, type: string, message: string): NonNullable<HookedRequest['refuse']> {
  const body =
    format === 'anthropic'
      ? JSON.stringify({ type: 'error', error: { type, message } })
      : JSON.stringify({ error: { message, type, param: null, code: type } });
  // SDKs retry some statuses unless told not to (x-should-retry, read by Anthropic's and OpenAI's).
  return { status, headers: { 'content-type': 'application/json', 'x-should-retry': 'false', 'x-atelier-egress': 'LLM_GATEWAY' }, body };
}

const usd = (n: number): string => `$${n.toFixed(n < 1 ? 4 : 2)}`;

async function readBody(req: http.IncomingMessage): Promise<Buffer | undefined> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > MAX_REQUEST_BYTES) return undefined;
    parts.push(c);
  }
  return Buffer.concat(parts);
}

export class LlmGateway implements BrokerHook {
  private readonly byBinding = new Map<CredentialBinding, LlmProvider>();
  private readonly byAuthority = new Map<string, LlmProvider>();

  constructor(private readonly opts: LlmGatewayOptions) {
    for (const p of opts.providers) {
      this.byBinding.set(p.binding, p);
      this.byAuthority.set(`${p.host}:${p.port}`, p);
    }
  }

  /** The allowlist entries every workshop gets for the providers (`host`, or `host:port` off 443). */
  allowEntries(): string[] {
    return this.opts.providers.map((p) => (p.port === 443 ? p.host : `${p.host}:${p.port}`));
  }

  /**
   * What every workshop's environment gets: the SDKs refuse to start without a key, so each
   * provider's variable holds a placeholder (the broker replaces the header it becomes); a provider
   * off its kind's default base URL is named too. The first provider of a kind sets them.
   */
  workshopEnv(): Record<string, string> {
    const env: Record<string, string> = {};
    for (const p of [...this.opts.providers].reverse()) {
      if (p.kind === 'anthropic') {
        env.ANTHROPIC_API_KEY = GATEWAY_PLACEHOLDER;
        if (p.baseUrl !== DEFAULT_BASE.anthropic) env.ANTHROPIC_BASE_URL = p.baseUrl;
        else delete env.ANTHROPIC_BASE_URL;
      } else {
        env.OPENAI_API_KEY = GATEWAY_PLACEHOLDER;
        if (p.baseUrl !== DEFAULT_BASE.openai) env.OPENAI_BASE_URL = p.baseUrl;
        else delete env.OPENAI_BASE_URL;
      }
    }
    return env;
  }

  bindingFor(host: string, port: number): CredentialBinding | undefined {
    return this.byAuthority.get(`${host}:${port}`)?.binding;
  }

  async request(workshopId: string, binding: CredentialBinding, req: http.IncomingMessage): Promise<HookedRequest | undefined> {
    const p = this.byBinding.get(binding);
    // Only POSTs ask a model for anything (GET /v1/models and the like pass, unmetered).
    if (!p || req.method !== 'POST') return undefined;
    const b = await this.opts.budget(workshopId);
    if (b && b.budgetUsd !== null && b.spentUsd >= b.budgetUsd)
      return this.refused(
        p,
        `atelier: the LLM budget of workshop ${workshopId} is spent (${usd(b.spentUsd)} of ${usd(b.budgetUsd)}): ` +
          `its owner can raise it with \`atelier workshops budget ${workshopId} <USD>\``,
        'budget',
      );
    let body = await readBody(req);
    if (body === undefined)
      return this.refused(p, `atelier: a model request is at most ${MAX_REQUEST_BYTES >> 20} MiB through the LLM gateway`, 'size');
    let model: string | undefined;
    let parsed: Record<string, unknown> | undefined;
    try {
      const v: unknown = JSON.parse(body.toString('utf8'));
      if (v !== null && typeof v === 'object' && !Array.isArray(v)) parsed = v as Record<string, unknown>;
    } catch {
      // not JSON: sent as it is, its answer read all the same
    }
    if (parsed && typeof parsed.model === 'string') model = parsed.model.slice(0, 200);
    // A Chat Completions stream reports usage only when asked: the gateway asks (the client then
    // gets one more chunk, with empty `choices` and the usage, as the API documents).
    const path = (req.url ?? '').split('?')[0]!;
    if (p.format === 'openai' && parsed && parsed.stream === true && /\/(chat\/)?completions$/.test(path)) {
      const so = parsed.stream_options;
      const options = so !== null && typeof so === 'object' && !Array.isArray(so) ? (so as Record<string, unknown>) : {};
      if (options.include_usage !== true)
        body = Buffer.from(JSON.stringify({ ...parsed, stream_options: { ...options, include_usage: true } }));
    }
    let recorded: Promise<void> | undefined;
    const record = (
      status: number,
      usage: { model: string | undefined; inputTokens: number; outputTokens: number; reported: boolean },
    ): Promise<void> => {
      if (recorded) return recorded;
      const { price } = priceOf(this.opts.prices, usage.model);
      const r: LlmRequestRecord = {
        provider: p.kind,
        model: usage.model ?? null,
        status,
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
        usageReported: usage.reported,
        costUsd: costOf(price, usage.inputTokens, usage.outputTokens),
      };
      recorded = this.opts.record(workshopId, r).catch((err: unknown) => this.opts.onError(workshopId, err));
      return recorded;
    };
    return {
      // Answers are read as sent: a compressed one could not be (the client's own decoding is untouched).
      headers: { 'accept-encoding': 'identity' },
      body,
      answered: (status, headers) => {
        const encoding = String(headers['content-encoding'] ?? 'identity').toLowerCase();
        const reader = encoding === 'identity' ? new UsageReader(p.format, headers['content-type'], model) : undefined;
        return {
          data: (chunk) => reader?.write(chunk),
          end: () => recorded ?? record(status, reader?.end() ?? { model, inputTokens: 0, outputTokens: 0, reported: false }),
        };
      },
      unanswered: () => void record(0, { model, inputTokens: 0, outputTokens: 0, reported: false }),
    };
  }

  private refused(p: LlmProvider, message: string, why: 'budget' | 'size'): HookedRequest {
    const refuse =
      why === 'size'
        ? refusal(p.format, 413, p.format === 'anthropic' ? 'request_too_large' : 'invalid_request_error', message)
        : p.format === 'anthropic'
          ? refusal(p.format, 402, 'billing_error', message)
          : refusal(p.format, 429, 'insufficient_quota', message);
    return { refuse, answered: () => ({ data: () => undefined, end: async () => undefined }), unanswered: () => undefined };
  }
}
