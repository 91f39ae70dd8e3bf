// Reads the usage a model provider reports in its answer, from a copy of the bytes as they pass
// (the client gets each chunk as it comes; nothing here holds it back). Anthropic Messages:
// `usage.input_tokens/output_tokens` in a JSON answer, or in a stream the `message_start` event's
// `message.usage` and the cumulative `usage` of `message_delta`. OpenAI Chat Completions:
// `usage.prompt_tokens/completion_tokens`, in a stream the chunk that carries `usage` (asked for
// with `stream_options.include_usage`); the Responses API's `usage.input_tokens/output_tokens`
// (in a stream, `response.completed`).

export type ProviderFormat = 'anthropic' | 'openai';

export interface Usage {
  model: string | undefined;
  inputTokens: number;
  outputTokens: number;
  /** False: the answer said nothing of its usage (an error, a cut stream, a shape not known). */
  reported: boolean;
}

/** A JSON answer larger than this is passed on but not read (no provider sends one that big). */
const MAX_JSON_BYTES = 16 << 20;
/** An SSE line longer than this is skipped (usage events are a few hundred bytes). */
const MAX_LINE_BYTES = 1 << 20;

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | undefined => (v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : undefined);
const count = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : undefined);

export class UsageReader {
  private readonly sse: boolean;
  private json: Buffer[] = [];
  private jsonBytes = 0;
  private line: Buffer[] = [];
  private lineBytes = 0;
  private model: string | undefined;
  private input: number | undefined;
  private output: number | undefined;

  constructor(
    private readonly format: ProviderFormat,
    contentType: string | undefined,
    /** The model the request named: the price when the answer does not say. */
    requested: string | undefined,
  ) {
    this.sse = (contentType ?? '').toLowerCase().startsWith('text/event-stream');
    this.model = requested;
  }

  /** A copy of the next chunk of the answer's body. */
  write(chunk: Buffer): void {
    if (!this.sse) {
      this.jsonBytes += chunk.length;
      if (this.jsonBytes <= MAX_JSON_BYTES) this.json.push(chunk);
      else this.json = [];
      return;
    }
    let from = 0;
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, from)) {
      this.pushLine(chunk.subarray(from, i));
      this.endLine();
      from = i + 1;
    }
    if (from < chunk.length) this.pushLine(chunk.subarray(from));
  }

  /** What was read: call when the body ended (or was cut: what the stream said so far counts). */
  end(): Usage {
    if (this.sse) this.endLine();
    else if (this.jsonBytes > 0 && this.jsonBytes <= MAX_JSON_BYTES) {
      try {
        this.read(JSON.parse(Buffer.concat(this.json).toString('utf8')));
      } catch {
        // not JSON: no usage
      }
    }
    return {
      model: this.model,
      inputTokens: this.input ?? 0,
      outputTokens: this.output ?? 0,
      reported: this.input !== undefined || this.output !== undefined,
    };
  }

  private pushLine(b: Buffer): void {
    this.lineBytes += b.length;
    if (this.lineBytes <= MAX_LINE_BYTES) this.line.push(b);
  }

  private endLine(): void {
    const over = this.lineBytes > MAX_LINE_BYTES;
    const text = over ? '' : Buffer.concat(this.line).toString('utf8').replace(/\r$/, '');
    this.line = [];
    this.lineBytes = 0;
    if (!text.startsWith('data:')) return;
    const data = text.slice(5).trim();
    if (data === '' || data === '[DONE]') return;
    try {
      this.read(JSON.parse(data));
    } catch {
      // a line that is not JSON: skipped
    }
  }

  /** One JSON answer, or one event of a stream. */
  private read(v: unknown): void {
    const o = obj(v);
    if (!o) return;
    if (this.format === 'anthropic') {
      // message_start carries the message (its model and first usage); message_delta the running totals.
      const message = obj(o.message);
      this.take(message ?? o, obj((message ?? o).usage));
      return;
    }
    const response = obj(o.response);
    if (response) this.take(response, obj(response.usage));
    else this.take(o, obj(o.usage));
  }

  private take(holder: Json, usage: Json | undefined): void {
    if (typeof holder.model === 'string' && holder.model.length <= 200) this.model = holder.model;
    if (!usage) return;
    // Anthropic counts cache writes and reads apart from input_tokens: all are input here.
    const input =
      this.format === 'anthropic'
        ? sum(count(usage.input_tokens), count(usage.cache_creation_input_tokens), count(usage.cache_read_input_tokens))
        : (count(usage.prompt_tokens) ?? count(usage.input_tokens));
    const output =
      this.format === 'anthropic' ? count(usage.output_tokens) : (count(usage.completion_tokens) ?? count(usage.output_tokens));
    // Totals only grow within an answer: the largest seen is the answer's.
    if (input !== undefined) this.input = Math.max(this.input ?? 0, input);
    if (output !== undefined) this.output = Math.max(this.output ?? 0, output);
  }
}

function sum(...xs: (number | undefined)[]): number | undefined {
  const known = xs.filter((x): x is number => x !== undefined);
  return known.length === 0 ? undefined : known.reduce((a, b) => a + b, 0);
}
