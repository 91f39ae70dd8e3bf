// A stand-in for the model providers (the real ones cannot be reached from here): one HTTPS
// origin that speaks the Anthropic Messages API (`POST /v1/messages`) and OpenAI Chat Completions
// (`POST /v1/chat/completions`), streaming (SSE) included, under the providers' own names
// (api.anthropic.com, api.openai.com) on port 443 of a loopback address of its own, with a
// certificate of a CA made here. It keeps its own count of the tokens it reported, and of what
// each request carried (never the key itself: whether it was the expected one).
import { createHash, randomInt } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import { makeOriginCertificates } from './tls.js';

export const PROVIDER_NAMES = ['api.anthropic.com', 'api.openai.com'];

export interface StandInRequest {
  path: string;
  /** The key the gateway was to add: `expected`, `none`, or `other` (its value is not kept). */
  key: 'expected' | 'none' | 'other';
  /** What the request's key header held when it was not the expected key, if it is the placeholder. */
  placeholderSeen: boolean;
  stream: boolean;
  includeUsage: boolean;
  model: string;
}

export interface StandInTally {
  requests: number;
  inputTokens: number;
  outputTokens: number;
}

const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

/** A model name the stand-in answers without any usage (a provider that does not report it). */
export const NO_USAGE_MODEL = 'stand-in-no-usage';

export class LlmProviderStandIn {
  readonly seen: StandInRequest[] = [];
  /** What the stand-in itself reported, summed (answers without usage not included). */
  readonly tally: StandInTally = { requests: 0, inputTokens: 0, outputTokens: 0 };
  private n = 0;

  private constructor(
    private readonly server: https.Server,
    readonly address: string,
    readonly dir: string,
    private readonly keys: { anthropic: string; openai: string },
  ) {}

  /** The CA that signed its certificate (PEM file path): what the server must trust upstream. */
  get caFile(): string {
    return join(this.dir, 'ca.pem');
  }

  /** A hosts file mapping the providers' names to it. */
  get hostsFile(): string {
    return join(this.dir, 'hosts');
  }

  snapshot(): StandInTally {
    return { ...this.tally };
  }

  static async start(keys: { anthropic: string; openai: string }): Promise<LlmProviderStandIn> {
    const dir = mkdtempSync('/tmp/atelier-llm-stand-in-');
    makeOriginCertificates(dir, PROVIDER_NAMES, 'LLM provider stand-in CA');
    const holder: { self?: LlmProviderStandIn } = {};
    const server = https.createServer(
      { key: readFileSync(join(dir, 'origin.key')), cert: readFileSync(join(dir, 'origin.pem')) },
      (req, res) => holder.self!.handle(req, res),
    );
    // The SDKs' default base URLs are port 443: a loopback address of its own, so nothing else's port is taken.
    let address = '';
    for (let attempt = 0; ; attempt++) {
      address = `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(443, address, () => {
            server.off('error', reject);
            resolve();
          });
        });
        break;
      } catch (err) {
        if (attempt >= 5) throw err;
      }
    }
    writeFileSync(join(dir, 'hosts'), `${address} ${PROVIDER_NAMES.join(' ')}\n`);
    holder.self = new LlmProviderStandIn(server, address, dir, keys);
    return holder.self;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
    rmSync(this.dir, { recursive: true, force: true });
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      let body: { model?: string; stream?: boolean; stream_options?: { include_usage?: boolean } } = {};
      try {
        body = JSON.parse(Buffer.concat(parts).toString('utf8')) as typeof body;
      } catch {
        // answered below as a bad request
      }
      const path = (req.url ?? '').split('?')[0]!;
      const anthropic = path === '/v1/messages';
      const given = anthropic ? req.headers['x-api-key'] : req.headers.authorization;
      const expected = anthropic ? this.keys.anthropic : `Bearer ${this.keys.openai}`;
      const key = given === undefined ? 'none' : sha(String(given)) === sha(expected) ? 'expected' : 'other';
      this.seen.push({
        path,
        key,
        placeholderSeen: String(given ?? '').includes('atelier-llm-gateway'),
        stream: body.stream === true,
        includeUsage: body.stream_options?.include_usage === true,
        model: String(body.model ?? ''),
      });
      if (key !== 'expected')
        return this.error(res, anthropic, 401, anthropic ? 'authentication_error' : 'invalid_api_key', 'invalid x-api-key');
      if (path !== '/v1/messages' && path !== '/v1/chat/completions')
        return this.error(res, anthropic, 404, 'not_found_error', 'no such path');
      if (typeof body.model !== 'string') return this.error(res, anthropic, 400, 'invalid_request_error', 'model: required');
      this.n++;
      // Numbers of its own, different for every request, so that sums cannot match by chance.
      const input = 100_000 + this.n * 7;
      const output = 20_000 + this.n * 3;
      const reports = body.model !== NO_USAGE_MODEL && (anthropic || body.stream !== true || body.stream_options?.include_usage === true);
      if (reports) {
        this.tally.requests++;
        this.tally.inputTokens += input;
        this.tally.outputTokens += output;
      }
      if (anthropic)
        return body.stream === true
          ? this.anthropicStream(res, body.model, input, output)
          : this.anthropicJson(res, body.model, input, output);
      return body.stream === true
        ? this.openaiStream(res, body.model, reports ? { input, output } : undefined)
        : this.openaiJson(res, body.model, reports ? { input, output } : undefined);
    });
  }

  private error(res: http.ServerResponse, anthropic: boolean, status: number, type: string, message: string): void {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify(anthropic ? { type: 'error', error: { type, message } } : { error: { message, type, param: null, code: type } }),
    );
  }

  private anthropicJson(res: http.ServerResponse, model: string, input: number, output: number): void {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: `msg_${this.n}`,
        type: 'message',
        role: 'assistant',
        model,
        content: [{ type: 'text', text: 'Hello from the stand-in.' }],
        stop_reason: 'end_turn',
        stop_sequence: null,
        usage: { input_tokens: input, output_tokens: output },
      }),
    );
  }

  /** Events as Anthropic sends them; written in pieces that cut events (and lines) in two. */
  private anthropicStream(res: http.ServerResponse, model: string, input: number, output: number): void {
    const ev = (type: string, data: object): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    const text =
      ev('message_start', {
        message: {
          id: `msg_${this.n}`,
          type: 'message',
          role: 'assistant',
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: input, output_tokens: 1 },
        },
      }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('ping', {}) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hello ' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'from the stand-in.' } }) +
      ev('content_block_stop', { index: 0 }) +
      ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: output } }) +
      ev('message_stop', {});
    this.dribble(res, text);
  }

  private openaiJson(res: http.ServerResponse, model: string, usage: { input: number; output: number } | undefined): void {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: `chatcmpl-${this.n}`,
        object: 'chat.completion',
        created: 1_700_000_000,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'Hello from the stand-in.' }, finish_reason: 'stop' }],
        ...(usage
          ? { usage: { prompt_tokens: usage.input, completion_tokens: usage.output, total_tokens: usage.input + usage.output } }
          : {}),
      }),
    );
  }

  private openaiStream(res: http.ServerResponse, model: string, usage: { input: number; output: number } | undefined): void {
    const chunk = (choices: object[], extra: object = {}): string =>
      `data: ${JSON.stringify({ id: `chatcmpl-${this.n}`, object: 'chat.completion.chunk', created: 1_700_000_000, model, choices, ...extra })}\n\n`;
    const text =
      chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]) +
      chunk([{ index: 0, delta: { content: 'Hello ' }, finish_reason: null }]) +
      chunk([{ index: 0, delta: { content: 'from the stand-in.' }, finish_reason: 'stop' }]) +
      (usage
        ? chunk([], { usage: { prompt_tokens: usage.input, completion_tokens: usage.output, total_tokens: usage.input + usage.output } })
        : '') +
      'data: [DONE]\n\n';
    this.dribble(res, text);
  }

  /** Sends `text` in pieces of 37 bytes, a tick apart: a stream, never one write. */
  private dribble(res: http.ServerResponse, text: string): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const b = Buffer.from(text);
    let at = 0;
    const next = (): void => {
      if (res.destroyed) return;
      if (at >= b.length) return void res.end();
      res.write(b.subarray(at, at + 37));
      at += 37;
      setImmediate(next);
    };
    next();
  }
}
