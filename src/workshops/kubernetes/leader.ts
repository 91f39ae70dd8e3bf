import { KubeApiError, type KubeClient, type KubeObject } from './client.js';

/**
 * Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
 * the holder renews the lease every `retryMs`; another candidate takes it only once it has seen
 * the same lease unchanged (same resourceVersion) for `leaseMs` by its own clock, so no two
 * clocks are compared; a holder that could not renew for `renewDeadlineMs` stops leading before
 * its lease can expire for the others; every write carries the resourceVersion it read, so of
 * two candidates only one wins (the other gets 409). On close the holder releases the lease
 * (no holder, a 1 s duration): a replica stopped cleanly is replaced at once.
 */

interface Lease extends KubeObject {
  spec: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number;
    acquireTime?: string | null;
    renewTime?: string | null;
    leaseTransitions?: number;
  };
}

export interface LeaseElectorOptions {
  client: KubeClient;
  namespace: string;
  name: string;
  /** This candidate (the node's id): written as the lease's holder. */
  identity: string;
  leaseMs: number;
  log: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void };
  /** Called when this candidate becomes the leader; `signal` aborts when it stops leading. */
  onStartedLeading(signal: AbortSignal): void;
}

/** A MicroTime as the API server writes them (RFC 3339 with six fractional digits). */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export class LeaseElector {
  private leading: AbortController | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private tick: Promise<void> | undefined;
  /** The lease as last seen, and when (by this clock) its resourceVersion last changed. */
  private observed: { resourceVersion: string; at: number } | undefined;
  private lastRenew = 0;
  readonly renewDeadlineMs: number;
  readonly retryMs: number;
  private readonly path: string;

  constructor(private readonly opts: LeaseElectorOptions) {
    // client-go's defaults are 15 s / 10 s / 2 s: the same proportions.
    this.renewDeadlineMs = Math.round((opts.leaseMs * 2) / 3);
    this.retryMs = Math.max(100, Math.round(opts.leaseMs / 7.5));
    this.path = `/apis/coordination.k8s.io/v1/namespaces/${opts.namespace}/leases/${opts.name}`;
  }

  get isLeader(): boolean {
    return this.leading !== undefined;
  }

  start(): void {
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.tick = this.attempt().finally(() => this.schedule(this.retryMs));
    }, ms);
  }

  private async attempt(): Promise<void> {
    try {
      await this.acquireOrRenew();
    } catch (err) {
      this.opts.log.warn(
        { err: (err as Error).message, lease: this.opts.name },
        'workshop controller: the lease could not be read or renewed',
      );
    }
    // Not renewed in time: stop before the others may take it (they wait the whole lease).
    if (this.leading && Date.now() - this.lastRenew > this.renewDeadlineMs) this.stopLeading('its lease could not be renewed in time');
  }

  private async acquireOrRenew(): Promise<void> {
    const { client, identity, leaseMs } = this.opts;
    const now = Date.now();
    let lease: Lease;
    try {
      lease = await client.request<Lease>('GET', this.path);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
      try {
        const made = await client.request<Lease>('POST', this.path.slice(0, this.path.lastIndexOf('/')), {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: this.opts.name, namespace: this.opts.namespace },
          spec: {
            holderIdentity: identity,
            leaseDurationSeconds: Math.ceil(leaseMs / 1000),
            acquireTime: microTime(now),
            renewTime: microTime(now),
            leaseTransitions: 0,
          },
        });
        this.renewed(made, now);
      } catch (e) {
        if (!(e instanceof KubeApiError && e.status === 409)) throw e;
      }
      return;
    }
    const rv = lease.metadata.resourceVersion ?? '';
    if (this.observed?.resourceVersion !== rv) this.observed = { resourceVersion: rv, at: now };
    const holder = lease.spec.holderIdentity ?? '';
    const durationMs = (lease.spec.leaseDurationSeconds ?? Math.ceil(leaseMs / 1000)) * 1000;
    if (holder !== '' && holder !== identity && now < this.observed.at + durationMs) {
      if (this.leading) this.stopLeading(`${holder} holds the lease`);
      return;
    }
    if (holder !== identity) {
      lease.spec.acquireTime = microTime(now);
      lease.spec.leaseTransitions = (lease.spec.leaseTransitions ?? 0) + 1;
    }
    lease.spec.holderIdentity = identity;
    lease.spec.leaseDurationSeconds = Math.ceil(leaseMs / 1000);
    lease.spec.renewTime = microTime(now);
    try {
      this.renewed(await client.request<Lease>('PUT', this.path, lease), now);
    } catch (err) {
      // Another candidate wrote first: it leads (this one learns it at its next read).
      if (!(err instanceof KubeApiError && err.status === 409)) throw err;
    }
  }

  private renewed(lease: Lease, at: number): void {
    this.lastRenew = at;
    this.observed = { resourceVersion: lease.metadata.resourceVersion ?? '', at };
    if (this.leading || this.closed) return;
    this.leading = new AbortController();
    this.opts.log.info(
      { lease: this.opts.name, holder: this.opts.identity },
      'workshop controller: this node leads (it reconciles Workshop objects)',
    );
    this.opts.onStartedLeading(this.leading.signal);
  }

  private stopLeading(why: string): void {
    this.opts.log.warn({ lease: this.opts.name, why }, 'workshop controller: this node no longer leads');
    this.leading?.abort();
    this.leading = undefined;
  }

  /** Stops trying; a leader stops leading and releases its lease so that another takes over at once. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.tick?.catch(() => undefined);
    if (!this.leading) return;
    this.leading.abort();
    this.leading = undefined;
    try {
      const lease = await this.opts.client.request<Lease>('GET', this.path);
      if (lease.spec.holderIdentity !== this.opts.identity) return;
      lease.spec.holderIdentity = null;
      lease.spec.leaseDurationSeconds = 1;
      lease.spec.renewTime = microTime(Date.now());
      await this.opts.client.request('PUT', this.path, lease);
    } catch (err) {
      // Not released: the others take over when it expires.
      this.opts.log.warn({ err: (err as Error).message }, 'workshop controller: the lease could not be released');
    }
  }
}
