import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';
import { filesHolding, insideSearch } from './helpers/leaks.js';
import { REPO_ROOT, TestServer, makeRepo } from './helpers/server.js';
import { LlmProviderStandIn, NO_USAGE_MODEL, type StandInTally } from './helpers/llm-provider.stand-in.js';

// The LLM gateway against a stand-in for the providers (they cannot be reached from here): the
// stand-in answers as api.anthropic.com and api.openai.com on port 443 of a loopback address of
// its own (the server's hosts file maps the names to it). Inside the workshops the clients are
// real: the official @anthropic-ai/sdk and openai packages, each with its default base URL and no
// key of its own, and curl.
const KEYS = {
  anthropic: `sk-standin-ant-${randomBytes(16).toString('hex')}`,
  openai: `sk-standin-oai-${randomBytes(16).toString('hex')}`,
};
// Prices of the gateway's file (USD per million tokens): laid over the default table.
const PRICES: Record<string, { input: number; output: number }> = {
  'claude-sonnet-4-5': { input: 3, output: 15 },
  'gpt-4o-mini': { input: 0.15, output: 0.6 },
};

/**
 * The agent's program, bundled with the SDKs into one file of the repository (how the packages
 * reach the workshop). Node 20's fetch does not read HTTPS_PROXY, so it sets undici's
 * EnvHttpProxyAgent, as any Node program behind a proxy does; nothing else is configured.
 */
const AGENT = `
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { EnvHttpProxyAgent, setGlobalDispatcher } from 'undici';
setGlobalDispatcher(new EnvHttpProxyAgent());
const [what, model] = process.argv.slice(2);
const messages = [{ role: 'user', content: 'Say hello.' }];
(async () => {
try {
  let out;
  if (what === 'anthropic-json') {
    const m = await new Anthropic().messages.create({ model, max_tokens: 64, messages });
    out = { text: m.content[0].text, usage: m.usage };
  } else if (what === 'anthropic-stream') {
    const s = new Anthropic().messages.stream({ model, max_tokens: 64, messages });
    let text = '';
    s.on('text', (t) => (text += t));
    const m = await s.finalMessage();
    out = { text, usage: m.usage };
  } else if (what === 'openai-json') {
    const c = await new OpenAI().chat.completions.create({ model, messages });
    out = { text: c.choices[0].message.content, usage: c.usage };
  } else if (what === 'openai-stream') {
    const s = await new OpenAI().chat.completions.create({ model, messages, stream: true });
    let text = '';
    for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
    out = { text };
  }
  console.log(JSON.stringify(out));
} catch (err) {
  console.log(JSON.stringify({ error: { status: err.status, name: err.constructor.name, message: err.message } }));
  process.exitCode = 3;
}
})();
`;

interface Llm {
  spentUsd: number;
  requests: number;
  requestsWithoutUsage: number;
  inputTokens: number;
  outputTokens: number;
}

const diff = (a: StandInTally, b: StandInTally): StandInTally => ({
  requests: a.requests - b.requests,
  inputTokens: a.inputTokens - b.inputTokens,
  outputTokens: a.outputTokens - b.outputTokens,
});

describe('LLM gateway (providers: stand-in)', () => {
  let standIn: LlmProviderStandIn;
  let server: TestServer;
  let dir: string;
  let repo: string;
  let wsA: string;
  let wsB: string;

  const agent = async (
    ws: string,
    what: string,
    model: string,
  ): Promise<{ exitCode: number; out: Record<string, unknown>; stderr: string }> => {
    const r = await server.exec(ws, ['node', '/workspace/agent.cjs', what, model]);
    let out: Record<string, unknown> = {};
    try {
      out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as Record<string, unknown>;
    } catch {
      // left empty: the assertion shows stdout and stderr
    }
    return { exitCode: r.exitCode, out, stderr: `${r.stdout}\n${r.stderr}` };
  };
  const llm = async (ws: string): Promise<Llm> => {
    const r = await server.api<{ llm: Llm }>('GET', `/v1/workshops/${ws}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.llm;
  };
  const price = (model: string, t: StandInTally): number =>
    (t.inputTokens * PRICES[model]!.input + t.outputTokens * PRICES[model]!.output) / 1_000_000;

  before(async () => {
    standIn = await LlmProviderStandIn.start(KEYS);
    dir = mkdtempSync('/tmp/atelier-gateway-');
    writeFileSync(
      join(dir, 'gateway.yaml'),
      [
        'providers:',
        '  - kind: anthropic',
        '    key: ANTHROPIC_API_KEY',
        '  - kind: openai',
        '    key: OPENAI_API_KEY',
        'prices:',
        ...Object.entries(PRICES).map(([m, p]) => `  ${m}: { input: ${p.input}, output: ${p.output} }`),
        '',
      ].join('\n'),
    );
    server = await TestServer.start({
      env: {
        ATELIER_EGRESS_HOSTS: standIn.hostsFile,
        ATELIER_EGRESS_ALLOW_RANGES: `${standIn.address}/32`,
        ATELIER_EGRESS_UPSTREAM_CA: standIn.caFile,
        ATELIER_LLM_GATEWAY: join(dir, 'gateway.yaml'),
      },
    });
    for (const [name, value] of [
      ['ANTHROPIC_API_KEY', KEYS.anthropic],
      ['OPENAI_API_KEY', KEYS.openai],
    ] as const) {
      const set = await server.api('PUT', `/v1/secrets/${name}`, { value });
      assert.equal(set.status, 200, JSON.stringify(set.body));
    }
    const bundle = await build({
      stdin: { contents: AGENT, resolveDir: REPO_ROOT, loader: 'js' },
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      write: false,
      logLevel: 'silent',
    });
    const code = bundle.outputFiles[0]!.text;
    repo = makeRepo({ 'agent.cjs': code, 'README.md': '# an agent\n' });
    const a = await server.createWorkshop({ repo, name: 'llm-a' });
    assert.equal(a.status, 'Running', a.statusReason ?? '');
    wsA = a.id;
    const b = await server.createWorkshop({ repo, name: 'llm-b', budgetUsd: 1 });
    assert.equal(b.status, 'Running', b.statusReason ?? '');
    wsB = b.id;
  });

  after(async () => {
    await server?.dispose();
    await standIn?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (repo) rmSync(repo, { recursive: true, force: true });
  });

  it('the official SDKs, with no key and their default base URLs, are answered; their usage adds up to the stand-in’s count', async () => {
    const start = standIn.snapshot();
    for (const what of ['anthropic-json', 'anthropic-stream']) {
      const r = await agent(wsA, what, 'claude-sonnet-4-5-20250929');
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.out.text, 'Hello from the stand-in.', r.stderr);
    }
    const afterAnthropic = standIn.snapshot();
    for (const what of ['openai-json', 'openai-stream']) {
      const r = await agent(wsA, what, 'gpt-4o-mini');
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.out.text, 'Hello from the stand-in.', r.stderr);
    }
    const afterOpenai = standIn.snapshot();
    // The key reached the stand-in, set by the gateway, never the SDK's placeholder.
    assert.ok(standIn.seen.length >= 4);
    assert.ok(
      standIn.seen.every((s) => s.key === 'expected' && !s.placeholderSeen),
      JSON.stringify(standIn.seen),
    );
    // The openai SDK's stream did not ask for usage: the gateway did.
    const streamed = standIn.seen.filter((s) => s.path === '/v1/chat/completions' && s.stream);
    assert.equal(streamed.length, 1);
    assert.equal(streamed[0]!.includeUsage, true);
    const ant = diff(afterAnthropic, start);
    const oai = diff(afterOpenai, afterAnthropic);
    assert.equal(ant.requests, 2);
    assert.equal(oai.requests, 2);
    const got = await llm(wsA);
    assert.equal(got.requests, 4);
    assert.equal(got.requestsWithoutUsage, 0);
    assert.equal(got.inputTokens, ant.inputTokens + oai.inputTokens);
    assert.equal(got.outputTokens, ant.outputTokens + oai.outputTokens);
    const expected = price('claude-sonnet-4-5', ant) + price('gpt-4o-mini', oai);
    assert.ok(Math.abs(got.spentUsd - expected) < 1e-9, `${got.spentUsd} vs ${expected}`);
  });

  it('curl, streamed and not, is metered the same way; an answer without usage is counted and says so', async () => {
    const before = await llm(wsA);
    const start = standIn.snapshot();
    const curl = (path: string, body: object): Promise<{ exitCode: number; stdout: string; stderr: string }> =>
      server.exec(wsA, [
        'curl',
        '-sS',
        '--fail',
        `https://${path}`,
        '-H',
        'content-type: application/json',
        '-H',
        'anthropic-version: 2023-06-01',
        '-d',
        JSON.stringify(body),
      ]);
    const streamed = await curl('api.anthropic.com/v1/messages', {
      model: 'claude-sonnet-4-5',
      max_tokens: 10,
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(streamed.exitCode, 0, streamed.stderr);
    assert.match(streamed.stdout, /event: message_stop/);
    const json = await curl('api.openai.com/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(json.exitCode, 0, json.stderr);
    const none = await curl('api.openai.com/v1/chat/completions', { model: NO_USAGE_MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(none.exitCode, 0, none.stderr);
    assert.doesNotMatch(none.stdout, /"usage"/);
    const t = diff(standIn.snapshot(), start);
    assert.equal(t.requests, 2, 'two answers reported usage');
    const now = await llm(wsA);
    assert.equal(now.requests - before.requests, 3);
    assert.equal(now.requestsWithoutUsage - before.requestsWithoutUsage, 1);
    assert.equal(now.inputTokens - before.inputTokens, t.inputTokens);
    assert.equal(now.outputTokens - before.outputTokens, t.outputTokens);
  });

  it('the budget stops the next model request, in the provider’s own error format; raised, requests go through again', async () => {
    // Each answer costs about $0.60 here (100k tokens in at $3/M, 20k out at $15/M): the second passes the $1 budget.
    for (let i = 0; i < 2; i++) {
      const r = await agent(wsB, 'anthropic-json', 'claude-sonnet-4-5');
      assert.equal(r.exitCode, 0, r.stderr);
    }
    const spent = await llm(wsB);
    assert.ok(spent.spentUsd >= 1, JSON.stringify(spent));
    const seen = standIn.seen.length;
    const refused = await agent(wsB, 'anthropic-json', 'claude-sonnet-4-5');
    assert.equal(refused.exitCode, 3, refused.stderr);
    const e = refused.out.error as { status: number; message: string };
    assert.equal(e.status, 402);
    assert.match(e.message, /LLM budget of workshop .* is spent/);
    assert.match(e.message, new RegExp(`atelier workshops budget ${wsB} <USD>`));
    const openai = await agent(wsB, 'openai-stream', 'gpt-4o-mini');
    assert.equal(openai.exitCode, 3, openai.stderr);
    assert.equal((openai.out.error as { status: number }).status, 429);
    assert.match((openai.out.error as { message: string }).message, /budget .* is spent/);
    // Refused at the proxy: nothing reached the provider, and the SDKs did not retry.
    assert.equal(standIn.seen.length, seen);
    assert.equal((await llm(wsB)).requests, spent.requests);
    // An agent cannot raise its own budget.
    const own = await server.exec(wsB, [
      'bash',
      '-c',
      `curl -sS -o /dev/null -w '%{http_code}' -X PUT -H "authorization: Bearer $ATELIER_TOKEN" -H 'content-type: application/json' ` +
        `-d '{"budgetUsd":1000}' "$ATELIER_URL/v1/workshops/${wsB}/budget"`,
    ]);
    assert.equal(own.stdout, '403', own.stderr);
    // Its owner can, with the CLI.
    const raised = await server.cli(['workshops', 'budget', wsB, '5']);
    assert.equal(raised.code, 0, raised.stderr);
    assert.match(raised.stdout, /budget:\s+\$5\.00/);
    assert.match(raised.stdout, /llm spend:\s+\$1\.2\d+ in 2 model requests/);
    const again = await agent(wsB, 'anthropic-stream', 'claude-sonnet-4-5');
    assert.equal(again.exitCode, 0, again.stderr);
    const bad = await server.api('PUT', `/v1/workshops/${wsB}/budget`, { budgetUsd: -1 });
    assert.equal(bad.status, 400, JSON.stringify(bad.body));
  });

  it('two workshops’ spends are separate, and show in the API by user and tenant and in /metrics', async () => {
    const a = await llm(wsA);
    const b = await llm(wsB);
    assert.equal(a.requests, 7);
    assert.equal(b.requests, 3);
    const report = await server.api<{ tenant: Llm; users: (Llm & { userId: string })[] }>('GET', '/v1/spend');
    assert.equal(report.status, 200, JSON.stringify(report.body));
    assert.equal(report.body.tenant.requests, a.requests + b.requests);
    assert.ok(Math.abs(report.body.tenant.spentUsd - (a.spentUsd + b.spentUsd)) < 1e-9);
    assert.equal(report.body.users.length, 1);
    const metrics = await fetch(`${server.url}/metrics`).then((r) => r.text());
    const line = metrics.split('\n').find((l) => l.startsWith('atelier_llm_spend_usd{'));
    assert.ok(line, metrics.slice(0, 500));
    assert.ok(Math.abs(Number(line.split(' ').pop()) - (a.spentUsd + b.spentUsd)) < 1e-6, line);
    assert.match(metrics, new RegExp(`atelier_llm_workshop_spend_usd\\{workshop="${wsA}"\\} ${a.spentUsd.toString().slice(0, 6)}`));
    assert.match(metrics, /atelier_llm_requests\{tenant="[^"]+",usage="unreported"\} 1/);
    const status = await server.cli(['workshops', 'status', wsA]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /llm spend:\s+\$\d+\.\d{4} in 7 model requests \(1 reported no usage\)/);
  });

  it('the keys are nowhere inside the workshop, nor in the server’s files and logs', async () => {
    // The pattern is written so that it does not match itself (sk-standi[n]).
    const inside = await server.exec(wsA, ['bash', '-c', `${insideSearch('sk-standi[n]')}; echo "key:$ANTHROPIC_API_KEY $OPENAI_API_KEY"`]);
    assert.match(inside.stdout, /^files:\nprocs:0\nkey:atelier-llm-gateway atelier-llm-gateway\n$/, inside.stdout + inside.stderr);
    assert.deepEqual(filesHolding(server.dataDir, [KEYS.anthropic, KEYS.openai]), []);
    for (const ws of [wsA, wsB]) {
      const log = await server.api<unknown>('GET', `/v1/workshops/${ws}/egress`);
      assert.ok(!JSON.stringify(log.body).includes('sk-standin'));
    }
  });
});
