// The decision pipeline, the same for all three protocols (plain HTTP, CONNECT, SOCKS5):
// canonicalise the host → the workshop's internal names → the policy's lists → a human (the
// ask hook) for hosts the lists do not name → resolve → check every address. It opens no
// socket: the policy, the internal services, the resolver, the ask hook and the journal are
// given to it, so that it can be tested on its own (decide.test.ts).
import { type AddressClass, checkAddress } from './addresses.js';
import { hostFor, validPort } from './authority.js';
import { type CanonicalHost, canonicalizeHost } from './canonical.js';
import type { EgressPolicy, EgressProtocol } from './policy.js';
import { parseAnswers, type Resolver, ResolveError } from './resolver.js';
import {
  type AskAnswer,
  type AskDecision,
  type AskHook,
  describeTarget,
  type EgressDecision,
  type EgressLimits,
  type EgressReason,
  INTERNAL_SUFFIX,
  type InternalTarget,
} from './types.js';

/** What the pipeline needs from around it. */
export interface DecisionDeps {
  resolver: Resolver;
  /** Without a hook, unknown hosts are denied at once (NOT_ALLOWLISTED). */
  ask?: AskHook | undefined;
  /** Read at each decision (the proxy's own limits object). */
  limits: Pick<EgressLimits, 'dnsTimeoutMs' | 'askGraceMs'>;
  /** A workshop's internal services, by lower-case `host:port`. */
  internalServices(workshopId: string): ReadonlyMap<string, InternalTarget> | undefined;
  /** Every decision goes here once (the journal); must not throw. */
  record(workshopId: string, decision: EgressDecision): void;
  /** Unexpected failures of the ask hook (never a timeout). */
  onError(workshopId: string, error: unknown): void;
}

/** Whose request it is: the workshop and the policy it is judged by (the proxy's listener). */
export interface DecisionScope {
  readonly workshopId: string;
  readonly policy: EgressPolicy | undefined;
}

/**
 * Where the abort signal of a request comes from: read only when something waits (the ask hook,
 * the resolver), so that a request that never waits never makes one (the proxy's LazySignal).
 */
export interface Cancellation {
  readonly signal: AbortSignal;
}

/** A decision plus, when allowed, the checked addresses that may be dialed (and only those). */
export interface Verdict {
  decision: EgressDecision;
  dial: string[];
  /** Set for an internal name: the server's own target, dialed instead of any address. */
  internal?: InternalTarget;
  /** A list-allowed name: the resolver's answers it was decided on (a client connection may keep it). */
  answers?: string[];
}

/** Answers already in hand for this request (a kept decision's lookup), instead of resolving again. */
export type Resolved = { answers: string[] } | { error: unknown };

/**
 * An allowed plain-HTTP decision kept by one client connection for the exact authority it was
 * made for (the bytes of the request target's `host[:port]`): what depends only on the policy
 * (the canonical host, the entry that allowed it) and what the resolver's answers gave (the
 * checked addresses). Used only while the workshop's policy is the same object and the
 * resolver, asked again for this request, gives the same answers; anything else decides afresh.
 */
export interface ConnDecision {
  policy: EgressPolicy;
  host: string;
  port: number;
  entry: string | undefined;
  message: string;
  /** The resolver's answers, as it gave them, joined with newlines. */
  answers: string;
  dial: string[];
}

/** What a client connection holds for its kept decisions (the plain-HTTP forwarder's connection). */
export interface KeptDecisions {
  /** Allowed decisions this connection keeps, by the exact authority of the request target. */
  decisions: Map<string, ConnDecision> | undefined;
  /** Aborts the resolutions of kept decisions when the client goes (or one of them times out: the connection is then answered and closed). */
  dnsAbort: AbortController | undefined;
  /** One deadline timer per connection for those resolutions (one at a time), re-armed with refresh(). */
  dnsTimer: NodeJS.Timeout | undefined;
  onDnsTimeout: (() => void) | undefined;
}

/** Decisions a client connection keeps (distinct authorities it alternates between). */
const MAX_CONN_DECISIONS = 16;

type Base = Pick<EgressDecision, 'at' | 'protocol' | 'target' | 'port'>;

/** What the lists, or a human, said for a host they let through. */
interface Listed {
  reason: 'ALLOW_LISTED' | 'ASK_ALLOWED';
  entry?: string | undefined;
  approvalId?: string | undefined;
}

interface Asked {
  decision: AskDecision;
  reason: EgressReason;
  message: string;
  approvalId?: string;
}

/** A decision that refuses (not yet recorded). */
export function badRequest(protocol: EgressProtocol, target: string, message: string): EgressDecision {
  return { at: new Date(), protocol, target, host: '', port: 0, allowed: false, outcome: 'denied', reason: 'BAD_REQUEST', message };
}

/** Whether a canonical name is one of the workshops' own (`*.atelier.internal`, or the suffix itself). */
export function isInternalName(name: string): boolean {
  return name === INTERNAL_SUFFIX.slice(1) || name.endsWith(INTERNAL_SUFFIX);
}

/** Race a promise against a deadline; on timeout the signal aborts and `onTimeout` is thrown. */
export async function withDeadline<T>(
  ms: number,
  parent: AbortSignal,
  run: (s: AbortSignal) => Promise<T>,
  onTimeout: () => Error,
): Promise<T> {
  const ctl = new AbortController();
  const abort = () => ctl.abort();
  parent.addEventListener('abort', abort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      run(ctl.signal),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          ctl.abort();
          reject(onTimeout());
        }, ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    parent.removeEventListener('abort', abort);
  }
}

function forbiddenMessage(host: string, address: string, cls: AddressClass): string {
  const what = host === address ? host : `${host} resolves to ${address}, which`;
  return `${what} is a ${cls} address that workshops may not reach; an admin may allow its range in allowRanges`;
}

export class EgressDecider {
  constructor(private readonly deps: DecisionDeps) {}

  /**
   * The one decision path for all three protocols; every call records exactly one decision.
   * Order matters:
   * - an IP literal is checked as an address first, so a forbidden address is never offered
   *   to the ask hook;
   * - a name is checked against the lists before it is resolved, so names the policy does not
   *   allow never reach DNS (a lookup is itself a way to leak data);
   * - a name is resolved once, every answer is checked, and only checked answers are dialed.
   */
  async decide(
    scope: DecisionScope,
    protocol: EgressProtocol,
    rawHost: string,
    port: number,
    target: string,
    gone: Cancellation,
    resolved?: Resolved,
  ): Promise<Verdict> {
    const base: Base = { at: new Date(), protocol, target, port };
    const policy = scope.policy;
    if (!policy)
      return this.refuse(scope, base, 'NO_POLICY', '', `workshop ${scope.workshopId} has no egress policy yet: nothing may leave`);
    if (!validPort(port)) return this.refuse(scope, base, 'BAD_REQUEST', '', `port ${port} is not 1–65535`);
    const h = canonicalizeHost(rawHost);
    if (h.kind === 'refused') return this.refuse(scope, base, 'HOST_INVALID', '', h.message, { hostRefusal: h.reason });
    const hostPort = `${hostFor(h.value)}:${port}`;

    // The workshop's own services: never the policy's business, never DNS, never the internet.
    if (h.kind === 'name' && isInternalName(h.value)) return this.decideInternal(scope, base, h.value, hostPort);

    if (h.kind !== 'name') {
      const a = checkAddress(h.bytes, policy.allowRanges);
      if (!a.allowed)
        return this.refuse(scope, base, 'ADDRESS_FORBIDDEN', h.value, forbiddenMessage(h.value, a.address, a.class), {
          address: a.address,
          addressClass: a.class,
        });
    }

    const listed = await this.consult(scope, base, policy, h, hostPort, gone);
    if ('decision' in listed) return listed;

    let dial: string[];
    let raw: string[] | undefined;
    if (h.kind === 'name') {
      const checked = await this.resolveChecked(scope, base, policy, h.value, gone, resolved);
      if ('decision' in checked) return checked;
      ({ dial, raw } = checked);
    } else {
      dial = [checkAddress(h.bytes, policy.allowRanges).address];
    }
    const { reason, entry, approvalId } = listed;
    const d: EgressDecision = {
      ...base,
      host: h.value,
      allowed: true,
      outcome: 'allowed',
      reason,
      message: reason === 'ASK_ALLOWED' ? `${hostPort} allowed by a human` : `${hostPort} allowed by "${entry}"`,
      address: dial[0]!,
    };
    if (entry !== undefined) d.entry = entry;
    if (approvalId !== undefined) d.approvalId = approvalId;
    const v = this.done(scope, d, dial);
    // A list-allowed name may be kept by the client connection (plain HTTP; see decideKept()).
    if (raw && protocol === 'http' && reason === 'ALLOW_LISTED') v.answers = raw;
    return v;
  }

  /**
   * A plain-HTTP request for an authority its client connection has a kept decision for, under
   * the same policy: the name is resolved again (one lookup per request, as always), and when
   * the answers are exactly those the kept decision checked, it stands (recorded like any other
   * decision); any other answer, or a failure, is decided afresh from those same answers.
   */
  async decideKept(
    scope: DecisionScope,
    conn: KeptDecisions,
    k: ConnDecision,
    rawHost: string,
    target: string,
    gone: Cancellation,
  ): Promise<Verdict> {
    let answers: string[];
    try {
      answers = await this.resolveKept(conn, k.host);
    } catch (error) {
      return this.decide(scope, 'http', rawHost, k.port, target, gone, { error });
    }
    if (scope.policy !== k.policy || answers.join('\n') !== k.answers)
      return this.decide(scope, 'http', rawHost, k.port, target, gone, { answers });
    const d: EgressDecision = {
      at: new Date(),
      protocol: 'http',
      target,
      host: k.host,
      port: k.port,
      allowed: true,
      outcome: 'allowed',
      reason: 'ALLOW_LISTED',
      message: k.message,
      address: k.dial[0]!,
    };
    if (k.entry !== undefined) d.entry = k.entry;
    this.deps.record(scope.workshopId, d);
    return { decision: d, dial: k.dial, answers };
  }

  private done(scope: DecisionScope, d: EgressDecision, dial: string[] = []): Verdict {
    this.deps.record(scope.workshopId, d);
    return { decision: d, dial };
  }

  private refuse(
    scope: DecisionScope,
    base: Base,
    reason: EgressReason,
    host: string,
    message: string,
    extra: Partial<EgressDecision> = {},
  ): Verdict {
    return this.done(scope, { ...base, host, allowed: false, outcome: 'denied', reason, message, ...extra });
  }

  /** An internal name: the server's own target for it, or INTERNAL_UNKNOWN naming the ones there are. */
  private decideInternal(scope: DecisionScope, base: Base, host: string, hostPort: string): Verdict {
    const services = this.deps.internalServices(scope.workshopId);
    const target = services?.get(hostPort);
    if (!target) {
      const known = [...(services?.keys() ?? [])].sort();
      return this.refuse(
        scope,
        base,
        'INTERNAL_UNKNOWN',
        host,
        `${hostPort} is not a service of this workshop` +
          (known.length ? ` (it has ${known.join(', ')})` : ' (it has none yet: see `atelier simulators list`)'),
      );
    }
    this.deps.record(scope.workshopId, {
      ...base,
      host,
      allowed: true,
      outcome: 'allowed',
      reason: 'INTERNAL_SERVICE',
      message: `${hostPort} is a service of this workshop`,
      address: describeTarget(target),
    });
    return {
      decision: { ...base, host, allowed: true, outcome: 'allowed', reason: 'INTERNAL_SERVICE', message: '' },
      dial: [],
      internal: target,
    };
  }

  /** The policy's lists, then (for a host they do not name) a human: why the host may go on, or the recorded refusal. */
  private async consult(
    scope: DecisionScope,
    base: Base,
    policy: EgressPolicy,
    h: CanonicalHost,
    hostPort: string,
    gone: Cancellation,
  ): Promise<Listed | Verdict> {
    const p = policy.evaluate(h, base.port, base.protocol);
    switch (p.outcome) {
      case 'deny':
        return this.refuse(
          scope,
          base,
          p.reason,
          h.value,
          p.reason === 'DENY_LISTED'
            ? `${hostPort} is denied by the entry "${p.entry}" of egress.deny`
            : `${h.value} is allowed on other ports only (entry "${p.entry}"): add "${hostPort}" to egress.allow`,
          { entry: p.entry },
        );
      case 'allow':
        return { reason: 'ALLOW_LISTED', entry: p.entry };
      case 'unknown': {
        const asked = await this.askHuman(scope, policy, h, base.port, base.protocol, gone.signal);
        const approvalId = asked.approvalId;
        if (asked.decision === 'allow') return { reason: 'ASK_ALLOWED', approvalId };
        const extra: Partial<EgressDecision> = {};
        if (approvalId !== undefined) extra.approvalId = approvalId;
        return this.done(scope, {
          ...base,
          host: h.value,
          allowed: false,
          outcome: 'unknown',
          reason: asked.reason,
          message: asked.message,
          ...extra,
        });
      }
    }
  }

  /** Resolve a name (or take the answers given) and check every answer: the addresses to dial, or the recorded refusal. */
  private async resolveChecked(
    scope: DecisionScope,
    base: Base,
    policy: EgressPolicy,
    name: string,
    gone: Cancellation,
    resolved: Resolved | undefined,
  ): Promise<{ dial: string[]; raw: string[] } | Verdict> {
    let answers: Uint8Array[];
    let raw: string[];
    try {
      // Resolved already when a client connection's kept decision was checked for this request.
      if (resolved && 'error' in resolved) throw resolved.error;
      raw = resolved ? resolved.answers : await this.resolve(name, gone);
      answers = parseAnswers(name, raw);
      if (answers.length === 0) throw new ResolveError('DNS_NOT_FOUND', `${name} has no address`);
    } catch (err) {
      const code: EgressReason = err instanceof ResolveError ? err.code : 'DNS_FAILED';
      return this.refuse(scope, base, code, name, `${(err as Error).message}`);
    }
    const dial: string[] = [];
    for (const b of answers) {
      const a = checkAddress(b, policy.allowRanges);
      // One forbidden answer condemns the name: a name that points at both a public and an
      // internal address is how rebinding attacks pick their moment.
      if (!a.allowed)
        return this.refuse(scope, base, 'ADDRESS_FORBIDDEN', name, forbiddenMessage(name, a.address, a.class), {
          address: a.address,
          addressClass: a.class,
        });
      if (!dial.includes(a.address)) dial.push(a.address);
    }
    return { dial, raw };
  }

  /** The resolver's answers for a canonical name, within dnsTimeoutMs. */
  private resolve(name: string, gone: Cancellation): Promise<string[]> {
    const ms = this.deps.limits.dnsTimeoutMs;
    return withDeadline(
      ms,
      gone.signal,
      (sig) => this.deps.resolver.resolve(name, sig),
      () => new ResolveError('DNS_TIMEOUT', `no answer for ${name} within ${ms} ms`),
    );
  }

  /**
   * resolve() for a connection's kept decisions, without the two abort controllers and the timer
   * per request: one controller per connection (aborted when it closes) and one timer, re-armed.
   * A timeout aborts the connection's controller: a DNS_TIMEOUT is answered and the connection closed.
   */
  private resolveKept(p: KeptDecisions, name: string): Promise<string[]> {
    const ctl = (p.dnsAbort ??= new AbortController());
    const ms = this.deps.limits.dnsTimeoutMs;
    return new Promise<string[]>((resolve, reject) => {
      let settled = false;
      p.onDnsTimeout = () => {
        if (settled) return;
        settled = true;
        ctl.abort();
        reject(new ResolveError('DNS_TIMEOUT', `no answer for ${name} within ${ms} ms`));
      };
      if (p.dnsTimer) p.dnsTimer.refresh();
      else {
        p.dnsTimer = setTimeout(() => p.onDnsTimeout?.(), ms);
        p.dnsTimer.unref();
      }
      this.deps.resolver.resolve(name, ctl.signal).then(
        (answers) => {
          if (settled) return;
          settled = true;
          p.onDnsTimeout = undefined;
          resolve(answers);
        },
        (err: unknown) => {
          if (settled) return;
          settled = true;
          p.onDnsTimeout = undefined;
          reject(err);
        },
      );
    });
  }

  private async askHuman(
    scope: DecisionScope,
    policy: EgressPolicy,
    h: CanonicalHost,
    port: number,
    protocol: EgressProtocol,
    signal: AbortSignal,
  ): Promise<Asked> {
    const hostPort = `${hostFor(h.value)}:${port}`;
    const notListed = `${hostPort} is not in this workshop's egress allowlist: add it to egress.allow in atelier.yaml`;
    const ask = this.deps.ask;
    if (!ask) return { decision: 'deny', reason: 'NOT_ALLOWLISTED', message: notListed };
    const holdMs = policy.askHoldMs;
    let answer: AskAnswer;
    try {
      answer = await withDeadline(
        holdMs + this.deps.limits.askGraceMs,
        signal,
        (sig) => ask(h.value, port, { workshopId: scope.workshopId, protocol, holdMs, signal: sig }),
        () => new Error('ask timeout'),
      );
    } catch (err) {
      if ((err as Error).message !== 'ask timeout') this.deps.onError(scope.workshopId, err);
      return { decision: 'deny', reason: 'ASK_TIMEOUT', message: `${notListed}; nobody decided within ${Math.round(holdMs / 1000)} s` };
    }
    const a = typeof answer === 'string' ? { decision: answer } : answer;
    const out: Asked = {
      decision: a.decision,
      reason: a.decision === 'allow' ? 'ASK_ALLOWED' : a.decision === 'pending' ? 'ASK_PENDING' : 'ASK_DENIED',
      message:
        a.decision === 'pending'
          ? `${hostPort} is waiting for a human's approval${a.approvalId ? ` (request ${a.approvalId})` : ''}: retry once it is approved`
          : `${hostPort} was refused by a human`,
    };
    if (a.approvalId !== undefined) out.approvalId = a.approvalId;
    return out;
  }
}

/** Keep an allowed decision on its client connection, for the exact authority of the request. */
export function keepDecision(conn: KeptDecisions, authority: string, policy: EgressPolicy, v: Verdict): void {
  const d = v.decision;
  conn.decisions ??= new Map();
  if (conn.decisions.size >= MAX_CONN_DECISIONS && !conn.decisions.has(authority)) conn.decisions.clear();
  conn.decisions.set(authority, {
    policy,
    host: d.host,
    port: d.port,
    entry: d.entry,
    message: d.message,
    answers: v.answers!.join('\n'),
    dial: v.dial,
  });
}
