import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseGatewayConfig } from './gateway.js';
import { DEFAULT_PRICES, costOf, priceOf } from './prices.js';
import { UsageReader, type ProviderFormat } from './usage.js';

const sse = (events: object[]): string => events.map((e) => `event: x\ndata: ${JSON.stringify(e)}\n\n`).join('');

/** Reads `text` cut into pieces of `size` bytes (1: every byte apart). */
function read(format: ProviderFormat, contentType: string, text: string, size: number, requested?: string): ReturnType<UsageReader['end']> {
  const r = new UsageReader(format, contentType, requested);
  const b = Buffer.from(text);
  for (let i = 0; i < b.length; i += size) r.write(b.subarray(i, i + size));
  return r.end();
}

describe('usage reported by providers', () => {
  const anthropicStream = sse([
    {
      type: 'message_start',
      message: { model: 'claude-sonnet-4-5-2025', usage: { input_tokens: 120, cache_read_input_tokens: 30, output_tokens: 1 } },
    },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'data: {"usage":{"output_tokens":999999}}' } },
    { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 57 } },
    { type: 'message_stop' },
  ]);

  it('an Anthropic stream: message_start and the running totals of message_delta, however the bytes are cut', () => {
    for (const size of [1, 2, 7, 64, 1 << 20])
      assert.deepEqual(read('anthropic', 'text/event-stream; charset=utf-8', anthropicStream, size), {
        model: 'claude-sonnet-4-5-2025',
        inputTokens: 150,
        outputTokens: 57,
        reported: true,
      });
  });

  it('an Anthropic JSON answer, with cache writes counted as input', () => {
    const body = JSON.stringify({
      type: 'message',
      model: 'claude-haiku-4-5',
      usage: { input_tokens: 10, cache_creation_input_tokens: 5, output_tokens: 3 },
    });
    assert.deepEqual(read('anthropic', 'application/json', body, 3), {
      model: 'claude-haiku-4-5',
      inputTokens: 15,
      outputTokens: 3,
      reported: true,
    });
  });

  it('an OpenAI stream: the usage chunk; without it, the request says usage was not reported', () => {
    const chunks = [
      { model: 'gpt-4o-mini-2024', choices: [{ delta: { content: 'hi' } }] },
      { model: 'gpt-4o-mini-2024', choices: [], usage: { prompt_tokens: 11, completion_tokens: 4 } },
    ];
    const text = chunks.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`).join('') + 'data: [DONE]\r\n\r\n';
    assert.deepEqual(read('openai', 'text/event-stream', text, 5), {
      model: 'gpt-4o-mini-2024',
      inputTokens: 11,
      outputTokens: 4,
      reported: true,
    });
    const without = `data: ${JSON.stringify(chunks[0])}\n\ndata: [DONE]\n\n`;
    assert.deepEqual(read('openai', 'text/event-stream', without, 5, 'gpt-4o-mini'), {
      model: 'gpt-4o-mini-2024',
      inputTokens: 0,
      outputTokens: 0,
      reported: false,
    });
  });

  it('the OpenAI Responses API, streamed (response.completed) and not', () => {
    const done = { type: 'response.completed', response: { model: 'gpt-5', usage: { input_tokens: 40, output_tokens: 9 } } };
    assert.deepEqual(read('openai', 'text/event-stream', `event: response.completed\ndata: ${JSON.stringify(done)}\n\n`, 4), {
      model: 'gpt-5',
      inputTokens: 40,
      outputTokens: 9,
      reported: true,
    });
    assert.deepEqual(read('openai', 'application/json', JSON.stringify(done.response), 4), {
      model: 'gpt-5',
      inputTokens: 40,
      outputTokens: 9,
      reported: true,
    });
  });

  it('an answer that is not JSON, or an error, reports nothing: the requested model is kept for the record', () => {
    assert.deepEqual(read('anthropic', 'text/html', '<html>bad gateway</html>', 8, 'claude-opus-4-1'), {
      model: 'claude-opus-4-1',
      inputTokens: 0,
      outputTokens: 0,
      reported: false,
    });
    const err = JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
    assert.equal(read('anthropic', 'application/json', err, 8).reported, false);
  });
});

describe('prices', () => {
  it('the longest entry a model name begins with prices it; an unknown model is priced as *', () => {
    assert.equal(priceOf(DEFAULT_PRICES, 'claude-sonnet-4-5-20250929').entry, 'claude-sonnet-4');
    assert.equal(priceOf(DEFAULT_PRICES, 'gpt-4o-mini-2024-07-18').entry, 'gpt-4o-mini');
    assert.equal(priceOf(DEFAULT_PRICES, 'gpt-4o-2024-08-06').entry, 'gpt-4o');
    assert.equal(priceOf(DEFAULT_PRICES, 'mystery-model').entry, '*');
    assert.equal(priceOf(DEFAULT_PRICES, undefined).entry, '*');
    assert.equal(costOf({ input: 3, output: 15 }, 1_000_000, 100_000), 4.5);
  });
});

describe('the gateway file (ATELIER_LLM_GATEWAY)', () => {
  it('providers become bindings with the header each API wants; prices are laid over the defaults', () => {
    const c = parseGatewayConfig(
      'providers:\n  - { kind: anthropic, key: A_KEY }\n  - { kind: openai-compatible, key: B_KEY, baseUrl: "https://LLM.example.com:8443/v1/" }\nprices:\n  mine: { input: 1, output: 2 }\n',
      'f',
    );
    assert.deepEqual(
      c.providers.map((p) => [p.kind, p.host, p.port, p.baseUrl, p.binding.header, p.binding.prefix, p.secret]),
      [
        ['anthropic', 'api.anthropic.com', 443, 'https://api.anthropic.com', 'x-api-key', '', 'A_KEY'],
        ['openai-compatible', 'llm.example.com', 8443, 'https://llm.example.com:8443/v1', 'Authorization', 'Bearer ', 'B_KEY'],
      ],
    );
    assert.deepEqual(c.prices.mine, { input: 1, output: 2 });
    assert.deepEqual(c.prices['gpt-4o'], DEFAULT_PRICES['gpt-4o']);
  });

  it('a bad file is refused with the field named', () => {
    const cases: [string, RegExp][] = [
      ['providers:\n  - { kind: openai-compatible, key: K }\n', /providers\.0\.baseUrl: an openai-compatible provider needs its base URL/],
      ['providers:\n  - { kind: openai, key: K, baseUrl: "http://api.openai.com/v1" }\n', /providers\.0\.baseUrl: write https:/],
      ['providers:\n  - { kind: anthropic, key: "1BAD" }\n', /providers\.0\.key: a secret name/],
      ['providers:\n  - { kind: gemini, key: K }\n', /providers\.0\.kind/],
      [
        'providers:\n  - { kind: anthropic, key: K }\n  - { kind: anthropic, key: L }\n',
        /providers\.1\.baseUrl: api\.anthropic\.com:443 is already/,
      ],
      ['prices:\n  m: { input: -1, output: 2 }\n', /prices\.m\.input/],
      ['providers: [\n', /f: not YAML/],
    ];
    for (const [text, expected] of cases) assert.throws(() => parseGatewayConfig(text, 'f'), expected);
  });
});
