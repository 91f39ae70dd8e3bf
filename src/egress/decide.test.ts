// The decision pipeline on its own: no socket, no listener. Its dependencies are the real
// policy and the real hosts resolver (wrapped to count lookups), an ask hook written per test,
// and a journal that is an array.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Cancellation, EgressDecider, type KeptDecisions, keepDecision, type Verdict } from './decide.js';
import { createEgressPolicy, type EgressPolicyConfig, type EgressProtocol } from './policy.js';
import { createHostsResolver, type HostsEntry, ResolveError, type Resolver } from './resolver.js';
import type { AskAnswer, AskContext, EgressDecision, InternalTarget } from './types.js';

interface Harness {
  decider: EgressDecider;
  journal: { workshopId: string; decision: EgressDecision }[];
  lookups: string[];
  asked: { host: string; port: number; context: AskContext }[];
  errors: unknown[];
  scope: { workshopId: string; policy: ReturnType<typeof createEgressPolicy> | undefined };
}

interface HarnessOptions {
  policy?: EgressPolicyConfig | null;
  hosts?: Record<string, HostsEntry>;
  resolver?: Resolver;
  ask?: (host: string, port: number, context: AskContext) => Promise<AskAnswer>;
  internal?: Record<string, InternalTarget>;
  dnsTimeoutMs?: number;
  askGraceMs?: number;
}

function harness(o: HarnessOptions = {}): Harness {
  const lookups: string[] = [];
  const hosts = o.resolver ?? createHostsResolver(o.hosts ?? {});
  const resolver: Resolver = {
    resolve(name, signal) {
      lookups.push(name);
      return hosts.resolve(name, signal);
    },
  };
  const journal: Harness['journal'] = [];
  const asked: Harness['asked'] = [];
  const errors: unknown[] = [];
  const internal = new Map(Object.entries(o.internal ?? {}));
  const ask = o.ask;
  const decider = new EgressDecider({
    resolver,
    ask: ask
      ? (host, port, context) => {
          asked.push({ host, port, context });
          return ask(host, port, context);
        }
      : undefined,
    limits: { dnsTimeoutMs: o.dnsTimeoutMs ?? 5000, askGraceMs: o.askGraceMs ?? 2000 },
    internalServices: (id) => (id === 'ws-1' ? internal : undefined),
    record: (workshopId, decision) => journal.push({ workshopId, decision }),
    onError: (_id, err) => errors.push(err),
  });
  const policy = o.policy === null ? undefined : createEgressPolicy(o.policy ?? { allow: [] });
  return { decider, journal, lookups, asked, errors, scope: { workshopId: 'ws-1', policy } };
}

/** A cancellation that never fires, counting how often its signal was asked for. */
function cancellation(): Cancellation & { reads: number; ctl: AbortController } {
  const ctl = new AbortController();
  return {
    reads: 0,
    ctl,
    get signal() {
      this.reads++;
      return ctl.signal;
    },
  };
}

function decide(h: Harness, host: string, port: number, protocol: EgressProtocol = 'connect', gone = cancellation()): Promise<Verdict> {
  return h.decider.decide(h.scope, protocol, host, port, `${host}:${port}`, gone);
}

/** Every decision is journaled exactly once, as it was returned (internal services excepted, see below). */
function onlyRecorded(h: Harness, v: Verdict): EgressDecision {
  assert.equal(h.journal.length, 1, `one decision recorded, got ${JSON.stringify(h.journal)}`);
  assert.equal(h.journal[0]!.workshopId, 'ws-1');
  assert.deepEqual(h.journal[0]!.decision, v.decision);
  return v.decision;
}

describe('decide: allowed by the lists', () => {
  it('allows a listed name on its default port and dials only the checked answers, once each', async () => {
    const h = harness({
      policy: { allow: ['api.example.com'] },
      hosts: { 'api.example.com': ['93.184.216.34', '93.184.216.34', '2606:2800:220:1::1'] },
    });
    const v = await decide(h, 'API.Example.COM.', 443);
    const d = onlyRecorded(h, v);
    assert.equal(d.allowed, true);
    assert.equal(d.outcome, 'allowed');
    assert.equal(d.reason, 'ALLOW_LISTED');
    assert.equal(d.host, 'api.example.com');
    assert.equal(d.entry, 'api.example.com');
    assert.equal(d.address, '93.184.216.34');
    assert.match(d.message, /api\.example\.com:443 allowed by "api\.example\.com"/);
    assert.deepEqual(v.dial, ['93.184.216.34', '2606:2800:220:1::1']);
    assert.deepEqual(h.lookups, ['api.example.com']);
    // Only plain HTTP keeps a decision on its connection.
    assert.equal(v.answers, undefined);
  });

  it('gives plain HTTP the answers it was decided on, so its connection may keep it', async () => {
    const h = harness({ policy: { allow: ['api.example.com'] }, hosts: { 'api.example.com': ['93.184.216.34'] } });
    const v = await decide(h, 'api.example.com', 80, 'http');
    assert.equal(v.decision.reason, 'ALLOW_LISTED');
    assert.deepEqual(v.answers, ['93.184.216.34']);
  });

  it('allows a listed public IP literal without any lookup', async () => {
    const h = harness({ policy: { allow: ['[2001:4860:4860::8888]:8443', '8.8.8.8'] } });
    const v4 = await decide(h, '8.8.8.8', 443, 'socks5');
    assert.equal(v4.decision.reason, 'ALLOW_LISTED');
    assert.deepEqual(v4.dial, ['8.8.8.8']);
    const v6 = await decide(h, '[2001:4860:4860:0::8888]', 8443);
    assert.equal(v6.decision.reason, 'ALLOW_LISTED');
    assert.equal(v6.decision.host, '2001:4860:4860::8888');
    assert.deepEqual(v6.dial, ['2001:4860:4860::8888']);
    assert.deepEqual(h.lookups, []);
  });

  it('never waits on, nor makes, an abort signal for a request it decides at once', async () => {
    const h = harness({ policy: { allow: ['8.8.8.8'], deny: ['bad.example.com'] } });
    const gone = cancellation();
    await decide(h, '8.8.8.8', 443, 'connect', gone);
    await decide(h, 'bad.example.com', 443, 'connect', gone);
    await decide(h, '127.0.0.1', 443, 'connect', gone);
    await decide(h, '', 443, 'connect', gone);
    assert.equal(h.journal.length, 4);
    assert.equal(gone.reads, 0);
  });
});

describe('decide: refused by the lists', () => {
  it('refuses a denied host before any lookup or question, even when it is also allowed', async () => {
    let asks = 0;
    const h = harness({
      policy: { allow: ['*.example.com'], deny: ['secret.example.com'] },
      hosts: { 'secret.example.com': '93.184.216.34' },
      ask: async () => {
        asks++;
        return 'allow';
      },
    });
    const d = onlyRecorded(h, await decide(h, 'secret.example.com', 443));
    assert.equal(d.allowed, false);
    assert.equal(d.outcome, 'denied');
    assert.equal(d.reason, 'DENY_LISTED');
    assert.equal(d.entry, 'secret.example.com');
    assert.match(d.message, /denied by the entry "secret\.example\.com" of egress\.deny/);
    assert.deepEqual(h.lookups, []);
    assert.equal(asks, 0);
  });

  it('refuses a listed host on a port its entry does not name, saying which entry to add', async () => {
    const h = harness({ policy: { allow: ['git.example.org:22'] } });
    const d = onlyRecorded(h, await decide(h, 'git.example.org', 443));
    assert.equal(d.reason, 'PORT_NOT_ALLOWED');
    assert.equal(d.entry, 'git.example.org:22');
    assert.match(d.message, /add "git\.example\.org:443" to egress\.allow/);
  });

  it('refuses a host the lists do not name when there is no ask hook, without resolving it', async () => {
    const h = harness({ policy: { allow: ['api.example.com'] }, hosts: { 'other.example.com': '93.184.216.34' } });
    const d = onlyRecorded(h, await decide(h, 'other.example.com', 443));
    assert.equal(d.allowed, false);
    assert.equal(d.outcome, 'unknown');
    assert.equal(d.reason, 'NOT_ALLOWLISTED');
    assert.match(d.message, /add it to egress\.allow in atelier\.yaml/);
    assert.deepEqual(h.lookups, []);
  });
});

describe('decide: a human decides hosts the lists do not name', () => {
  it('asks with the workshop, protocol and hold; an allow with an approval id lets it through after the address checks', async () => {
    const h = harness({
      policy: { allow: [], askHoldSeconds: 7 },
      hosts: { 'asked.example.com': '93.184.216.34' },
      ask: async () => ({ decision: 'allow', approvalId: 'ap-1' }),
    });
    const gone = cancellation();
    const v = await decide(h, 'Asked.Example.com', 443, 'socks5', gone);
    const d = onlyRecorded(h, v);
    assert.equal(d.reason, 'ASK_ALLOWED');
    assert.equal(d.outcome, 'allowed');
    assert.equal(d.approvalId, 'ap-1');
    assert.equal(d.entry, undefined);
    assert.match(d.message, /allowed by a human/);
    assert.deepEqual(v.dial, ['93.184.216.34']);
    assert.equal(h.asked.length, 1);
    const a = h.asked[0]!;
    assert.equal(a.host, 'asked.example.com');
    assert.equal(a.port, 443);
    assert.equal(a.context.workshopId, 'ws-1');
    assert.equal(a.context.protocol, 'socks5');
    assert.equal(a.context.holdMs, 7000);
  });

  it('aborts the question when the client goes away', async () => {
    const h = harness({
      policy: { allow: [] },
      ask: (_host, _port, context) =>
        new Promise<AskAnswer>((resolve) => context.signal.addEventListener('abort', () => resolve('deny'), { once: true })),
    });
    const gone = cancellation();
    const deciding = decide(h, 'gone.example.com', 443, 'connect', gone);
    await new Promise((r) => setImmediate(r));
    assert.equal(h.asked.length, 1);
    assert.equal(h.asked[0]!.context.signal.aborted, false);
    gone.ctl.abort();
    const d = onlyRecorded(h, await deciding);
    assert.equal(h.asked[0]!.context.signal.aborted, true);
    assert.equal(d.reason, 'ASK_DENIED');
  });

  it('still refuses a forbidden address that a human allowed by name', async () => {
    const h = harness({ policy: { allow: [] }, hosts: { 'sneaky.example.com': '127.0.0.1' }, ask: async () => 'allow' });
    const d = onlyRecorded(h, await decide(h, 'sneaky.example.com', 443));
    assert.equal(d.reason, 'ADDRESS_FORBIDDEN');
    assert.equal(d.addressClass, 'loopback');
  });

  it('answers pending with the approval to wait for, and refusal as ASK_DENIED, neither resolving the name', async () => {
    const pending = harness({ policy: { allow: [] }, ask: async () => ({ decision: 'pending', approvalId: 'ap-7' }) });
    const p = onlyRecorded(pending, await decide(pending, 'wait.example.com', 443));
    assert.equal(p.allowed, false);
    assert.equal(p.outcome, 'unknown');
    assert.equal(p.reason, 'ASK_PENDING');
    assert.equal(p.approvalId, 'ap-7');
    assert.match(p.message, /waiting for a human's approval \(request ap-7\): retry once it is approved/);
    assert.deepEqual(pending.lookups, []);

    const denied = harness({ policy: { allow: [] }, ask: async () => 'deny' });
    const n = onlyRecorded(denied, await decide(denied, 'no.example.com', 443));
    assert.equal(n.reason, 'ASK_DENIED');
    assert.equal(n.approvalId, undefined);
    assert.match(n.message, /refused by a human/);
    assert.deepEqual(denied.lookups, []);
  });

  it('refuses with ASK_TIMEOUT when nobody answers within the hold and its grace, aborting the question', async () => {
    let signal: AbortSignal | undefined;
    const h = harness({
      policy: { allow: [], askHoldSeconds: 0 },
      askGraceMs: 20,
      ask: (_host, _port, context) => {
        signal = context.signal;
        return new Promise<AskAnswer>(() => {});
      },
    });
    const d = onlyRecorded(h, await decide(h, 'slow.example.com', 443));
    assert.equal(d.reason, 'ASK_TIMEOUT');
    assert.match(d.message, /nobody decided within 0 s/);
    assert.equal(signal?.aborted, true);
    assert.deepEqual(h.errors, []);
  });

  it('refuses with ASK_TIMEOUT when the hook fails, and reports the failure', async () => {
    const h = harness({
      policy: { allow: [] },
      ask: async () => {
        throw new Error('approvals are down');
      },
    });
    const d = onlyRecorded(h, await decide(h, 'x.example.com', 443));
    assert.equal(d.reason, 'ASK_TIMEOUT');
    assert.equal(h.errors.length, 1);
    assert.match((h.errors[0] as Error).message, /approvals are down/);
  });

  it('never offers a forbidden IP literal to the ask hook', async () => {
    const h = harness({ policy: { allow: [] }, ask: async () => 'allow' });
    const d = onlyRecorded(h, await decide(h, '169.254.169.254', 80, 'http'));
    assert.equal(d.reason, 'ADDRESS_FORBIDDEN');
    assert.equal(d.addressClass, 'metadata');
    assert.equal(h.asked.length, 0);
  });
});

describe('decide: addresses after resolution', () => {
  it('refuses a listed name that resolves to a loopback, private or metadata address', async () => {
    const h = harness({
      policy: { allow: ['*.example.com'] },
      hosts: { 'lo.example.com': '127.0.0.1', 'lan.example.com': '10.1.2.3', 'md.example.com': '169.254.169.254', 'v6.example.com': '::1' },
    });
    for (const [host, cls, address] of [
      ['lo.example.com', 'loopback', '127.0.0.1'],
      ['lan.example.com', 'private', '10.1.2.3'],
      ['md.example.com', 'metadata', '169.254.169.254'],
      ['v6.example.com', 'loopback', '::1'],
    ] as const) {
      h.journal.length = 0;
      const v = await decide(h, host, 443);
      const d = onlyRecorded(h, v);
      assert.equal(d.reason, 'ADDRESS_FORBIDDEN', host);
      assert.equal(d.addressClass, cls, host);
      assert.equal(d.address, address, host);
      assert.match(
        d.message,
        new RegExp(`${host.replace(/\./g, '\\.')} resolves to ${address.replace(/\./g, '\\.')}, which is a ${cls} address`),
      );
      assert.deepEqual(v.dial, []);
    }
  });

  it('condemns a name when any one of its answers is forbidden (rebinding)', async () => {
    const h = harness({ policy: { allow: ['mixed.example.com'] }, hosts: { 'mixed.example.com': ['93.184.216.34', '192.168.0.1'] } });
    const v = await decide(h, 'mixed.example.com', 443);
    assert.equal(onlyRecorded(h, v).reason, 'ADDRESS_FORBIDDEN');
    assert.equal(v.decision.address, '192.168.0.1');
    assert.deepEqual(v.dial, []);
  });

  it('dials an IPv4-mapped answer as the IPv4 address it carries, and refuses it when that one is forbidden', async () => {
    const h = harness({
      policy: { allow: ['*.example.com'] },
      hosts: { 'ok.example.com': '::ffff:93.184.216.34', 'bad.example.com': '::ffff:127.0.0.1' },
    });
    assert.deepEqual((await decide(h, 'ok.example.com', 443)).dial, ['93.184.216.34']);
    const bad = await decide(h, 'bad.example.com', 443);
    assert.equal(bad.decision.reason, 'ADDRESS_FORBIDDEN');
    assert.equal(bad.decision.addressClass, 'loopback');
  });

  it('lets an admin range through: allowRanges', async () => {
    const h = harness({ policy: { allow: ['db.corp.test:5432'], allowRanges: ['10.0.0.0/8'] }, hosts: { 'db.corp.test': '10.9.8.7' } });
    const v = await decide(h, 'db.corp.test', 5432);
    assert.equal(v.decision.reason, 'ALLOW_LISTED');
    assert.deepEqual(v.dial, ['10.9.8.7']);
  });

  it('says DNS_NOT_FOUND, DNS_TIMEOUT or DNS_FAILED when resolution does not give an answer', async () => {
    const nx = harness({ policy: { allow: ['gone.example.com'] } });
    assert.equal(onlyRecorded(nx, await decide(nx, 'gone.example.com', 443)).reason, 'DNS_NOT_FOUND');

    let aborted: AbortSignal | undefined;
    const silent = harness({
      policy: { allow: ['slow.example.com'] },
      dnsTimeoutMs: 20,
      resolver: {
        resolve: (_name, signal) => {
          aborted = signal;
          return new Promise<string[]>(() => {});
        },
      },
    });
    const t = onlyRecorded(silent, await decide(silent, 'slow.example.com', 443));
    assert.equal(t.reason, 'DNS_TIMEOUT');
    assert.match(t.message, /no answer for slow\.example\.com within 20 ms/);
    assert.equal(aborted?.aborted, true);

    const broken = harness({
      policy: { allow: ['odd.example.com'] },
      resolver: {
        resolve: async () => {
          throw new Error('resolver crashed');
        },
      },
    });
    assert.equal(onlyRecorded(broken, await decide(broken, 'odd.example.com', 443)).reason, 'DNS_FAILED');

    const junk = harness({ policy: { allow: ['junk.example.com'] }, hosts: { 'junk.example.com': 'not-an-address' } });
    const j = onlyRecorded(junk, await decide(junk, 'junk.example.com', 443));
    assert.ok(j.reason === 'DNS_FAILED' || j.reason === 'DNS_NOT_FOUND', j.reason);
    assert.equal(j.allowed, false);
  });

  it('uses answers given to it instead of resolving again, and a failure given to it as the lookup result', async () => {
    const h = harness({ policy: { allow: ['api.example.com'] }, hosts: { 'api.example.com': '93.184.216.34' } });
    const v = await h.decider.decide(h.scope, 'http', 'api.example.com', 80, 't', cancellation(), { answers: ['93.184.216.35'] });
    assert.deepEqual(v.dial, ['93.184.216.35']);
    const e = await h.decider.decide(h.scope, 'http', 'api.example.com', 80, 't', cancellation(), {
      error: new ResolveError('DNS_TIMEOUT', 'late'),
    });
    assert.equal(e.decision.reason, 'DNS_TIMEOUT');
    assert.deepEqual(h.lookups, []);
  });
});

describe('decide: the workshop’s own *.atelier.internal names', () => {
  const pg: InternalTarget = { path: '/run/atelier/ws-1/pg.sock' };
  const api: InternalTarget = { host: '127.0.0.1', port: 7070 };

  it('leads a known service to the server’s target, whatever the policy says, with no lookup and no question', async () => {
    const h = harness({
      policy: { allow: [], deny: ['*.atelier.internal'] },
      internal: { 'pg.atelier.internal:5432': pg, 'atelier.internal:80': api },
      ask: async () => 'deny',
    });
    const v = await decide(h, 'PG.Atelier.Internal', 5432, 'socks5');
    assert.equal(v.decision.allowed, true);
    assert.equal(v.decision.reason, 'INTERNAL_SERVICE');
    assert.equal(v.decision.host, 'pg.atelier.internal');
    assert.deepEqual(v.internal, pg);
    assert.deepEqual(v.dial, []);
    // The journal says where it went; the answer itself carries the target instead.
    assert.equal(h.journal.length, 1);
    assert.equal(h.journal[0]!.decision.address, 'unix:/run/atelier/ws-1/pg.sock');
    assert.match(h.journal[0]!.decision.message, /pg\.atelier\.internal:5432 is a service of this workshop/);

    const bare = await decide(h, 'atelier.internal', 80, 'http');
    assert.deepEqual(bare.internal, api);
    assert.equal(h.journal[1]!.decision.address, '127.0.0.1:7070');
    assert.deepEqual(h.lookups, []);
    assert.equal(h.asked.length, 0);
  });

  it('refuses an internal name (or port) that is not a service of this workshop, naming the ones it has', async () => {
    const h = harness({ policy: { allow: ['*.example.com'] }, internal: { 'pg.atelier.internal:5432': pg }, ask: async () => 'allow' });
    for (const [host, port] of [
      ['redis.atelier.internal', 6379],
      ['pg.atelier.internal', 5433],
    ] as const) {
      h.journal.length = 0;
      const v = await decide(h, host, port);
      const d = onlyRecorded(h, v);
      assert.equal(d.reason, 'INTERNAL_UNKNOWN');
      assert.match(d.message, /is not a service of this workshop \(it has pg\.atelier\.internal:5432\)/);
      assert.equal(v.internal, undefined);
    }
    assert.deepEqual(h.lookups, []);
    assert.equal(h.asked.length, 0);

    const other = harness({ policy: { allow: [] } });
    other.scope.workshopId = 'ws-2';
    const d = (await decide(other, 'pg.atelier.internal', 5432)).decision;
    assert.equal(d.reason, 'INTERNAL_UNKNOWN');
    assert.match(d.message, /it has none yet: see `atelier simulators list`/);
  });

  it('does not take a look-alike for an internal name', async () => {
    const h = harness({ policy: { allow: [] }, internal: { 'pg.atelier.internal:5432': pg } });
    const d = (await decide(h, 'pg.atelier.internal.evil.com', 5432)).decision;
    assert.equal(d.reason, 'NOT_ALLOWLISTED');
  });
});

describe('decide: bad input', () => {
  it('refuses everything while the workshop has no policy', async () => {
    const h = harness({ policy: null, internal: { 'pg.atelier.internal:5432': { path: '/x' } } });
    for (const host of ['api.example.com', 'pg.atelier.internal', '8.8.8.8']) {
      h.journal.length = 0;
      const d = onlyRecorded(h, await decide(h, host, host.startsWith('pg') ? 5432 : 443));
      assert.equal(d.reason, 'NO_POLICY', host);
      assert.match(d.message, /workshop ws-1 has no egress policy yet/);
    }
  });

  it('refuses a port outside 1–65535 as BAD_REQUEST', async () => {
    const h = harness({ policy: { allow: ['api.example.com'] } });
    for (const port of [0, 65536, -1, NaN, 1.5]) {
      h.journal.length = 0;
      const d = onlyRecorded(h, await decide(h, 'api.example.com', port));
      assert.equal(d.reason, 'BAD_REQUEST', String(port));
      assert.equal(d.host, '');
      assert.match(d.message, /is not 1–65535/);
    }
  });

  it('refuses hosts that cannot be canonicalised, saying why', async () => {
    const h = harness({ policy: { allow: ['*.example.com'] }, ask: async () => 'allow' });
    for (const [host, refusal] of [
      ['', 'HOST_EMPTY'],
      ['[fe80::1%25eth0]', 'HOST_ZONE_ID'],
      ['api.example.com\r\nHost: evil.com', 'HOST_CONTROL_CHAR'],
      ['a..example.com', 'HOST_EMPTY_LABEL'],
      ['[::1', 'HOST_INVALID_IPV6'],
    ] as const) {
      h.journal.length = 0;
      const d = onlyRecorded(h, await decide(h, host, 443));
      assert.equal(d.reason, 'HOST_INVALID', JSON.stringify(host));
      assert.equal(d.hostRefusal !== undefined, true, JSON.stringify(host));
      if (refusal !== 'HOST_INVALID_IPV6') assert.equal(d.hostRefusal, refusal, JSON.stringify(host));
      assert.equal(d.host, '');
    }
    assert.deepEqual(h.lookups, []);
    assert.equal(h.asked.length, 0);
  });
});

describe('decideKept: a plain-HTTP connection’s kept decision', () => {
  function conn(): KeptDecisions {
    return { decisions: undefined, dnsAbort: undefined, dnsTimer: undefined, onDnsTimeout: undefined };
  }
  function release(c: KeptDecisions): void {
    if (c.dnsTimer) clearTimeout(c.dnsTimer);
    c.dnsAbort?.abort();
  }

  it('stands while the policy and the answers are the same, and is decided afresh when the answers change', async () => {
    const answers = ['93.184.216.34'];
    const h = harness({ policy: { allow: ['api.example.com'] }, hosts: { 'api.example.com': () => [...answers] } });
    const c = conn();
    try {
      const first = await decide(h, 'api.example.com', 80, 'http');
      keepDecision(c, 'api.example.com', h.scope.policy!, first);
      const k = c.decisions!.get('api.example.com')!;
      assert.equal(k.answers, '93.184.216.34');

      const again = await h.decider.decideKept(h.scope, c, k, 'api.example.com', 'http://api.example.com/', cancellation());
      assert.equal(again.decision.reason, 'ALLOW_LISTED');
      assert.deepEqual(again.dial, ['93.184.216.34']);
      assert.equal(again.decision.entry, 'api.example.com');
      assert.equal(h.journal.length, 2);
      assert.deepEqual(h.journal[1]!.decision, again.decision);
      // One lookup per request, kept or not.
      assert.deepEqual(h.lookups, ['api.example.com', 'api.example.com']);

      // The name now points inside: the kept decision does not stand.
      answers[0] = '127.0.0.1';
      const rebound = await h.decider.decideKept(h.scope, c, k, 'api.example.com', 'http://api.example.com/', cancellation());
      assert.equal(rebound.decision.reason, 'ADDRESS_FORBIDDEN');
      assert.equal(h.lookups.length, 3);
    } finally {
      release(c);
    }
  });

  it('lapses when the workshop’s policy is replaced', async () => {
    const h = harness({ policy: { allow: ['api.example.com'] }, hosts: { 'api.example.com': '93.184.216.34' } });
    const c = conn();
    try {
      const first = await decide(h, 'api.example.com', 80, 'http');
      keepDecision(c, 'api.example.com', h.scope.policy!, first);
      const k = c.decisions!.get('api.example.com')!;
      h.scope.policy = createEgressPolicy({ allow: [], deny: ['api.example.com'] });
      const v = await h.decider.decideKept(h.scope, c, k, 'api.example.com', 't', cancellation());
      assert.equal(v.decision.reason, 'DENY_LISTED');
    } finally {
      release(c);
    }
  });

  it('answers DNS_TIMEOUT when the new lookup does not answer in time', async () => {
    const h = harness({
      policy: { allow: ['api.example.com'] },
      dnsTimeoutMs: 20,
      resolver: { resolve: () => new Promise<string[]>(() => {}) },
    });
    const c = conn();
    // The connection's DNS timer does not hold the process open (its socket does, in the proxy).
    const alive = setInterval(() => {}, 1000);
    try {
      const k = {
        policy: h.scope.policy!,
        host: 'api.example.com',
        port: 80,
        entry: 'api.example.com',
        message: 'm',
        answers: '93.184.216.34',
        dial: ['93.184.216.34'],
      };
      const v = await h.decider.decideKept(h.scope, c, k, 'api.example.com', 't', cancellation());
      assert.equal(v.decision.reason, 'DNS_TIMEOUT');
      assert.equal(c.dnsAbort?.signal.aborted, true);
    } finally {
      clearInterval(alive);
      release(c);
    }
  });

  it('keeps a bounded number of decisions per connection', async () => {
    const h = harness({
      policy: { allow: ['*.example.com'] },
      hosts: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`h${i}.example.com`, '93.184.216.34'])),
    });
    const c = conn();
    for (let i = 0; i < 20; i++) {
      const v = await decide(h, `h${i}.example.com`, 80, 'http');
      keepDecision(c, `h${i}.example.com`, h.scope.policy!, v);
      assert.ok(c.decisions!.size <= 16, String(c.decisions!.size));
    }
    assert.ok(c.decisions!.has('h19.example.com'));
  });
});
