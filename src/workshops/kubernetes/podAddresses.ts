import { setTimeout as sleep } from 'node:timers/promises';
import { isIPv4 } from 'node:net';
import type { KubeClient, KubeObject } from './client.js';
import { WORKSHOP_LABEL } from './sandboxes.js';

/**
 * Which workshop a connection to the in-cluster egress proxy comes from, by its source address
 * (docs/kubernetes.md, "The egress proxy in the cluster"): a pod's IP is assigned by the CNI and
 * reported by the API server; the agent's container has no NET_ADMIN or NET_RAW (all capabilities
 * dropped, pod.ts), so it cannot send from another address, and nothing the agent writes in a
 * request is believed. This keeps, per pod of the workshops' namespace, its IPs and the workshop
 * its labels name, from a list and a watch of the namespace's pods (and of the SandboxClaims, since
 * a claimed pod is labelled by the claim's uid, not its name).
 *
 * An address is a workshop's only when exactly one live pod of the namespace has it: a pod that
 * took an address the watch has not yet seen released, a host-network pod (its IP is the node's)
 * or an unclaimed warm pod make it nobody's, and nobody's is refused.
 */

const CLAIM_UID_LABEL = 'agents.x-k8s.io/claim-uid';
const EXT = 'extensions.agents.x-k8s.io/v1beta1';

type PodObject = KubeObject & {
  spec?: { hostNetwork?: boolean };
  status?: { phase?: string; podIP?: string; podIPs?: { ip: string }[] };
};

interface PodEntry {
  ips: string[];
  /** The workshop id by the workshop label, or the claim uid to look up. */
  workshop?: string;
  claimUid?: string;
  hostNetwork: boolean;
}

/** The counts of the lists and watch resumptions made (what the mapping costs the API server). */
export interface PodAddressStats {
  lists: number;
  resumes: number;
}

/** `::ffff:10.0.0.5` (an IPv4 client on a dual-stack socket) is 10.0.0.5. */
export function normalizeAddress(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped && isIPv4(mapped[1]!)) return mapped[1]!;
  return address.toLowerCase();
}

export class PodAddresses {
  private readonly pods = new Map<string, PodEntry>();
  /** Claim uid → claim name (the workshop id). */
  private readonly claims = new Map<string, string>();
  private podsSynced = false;
  private claimsSynced = false;
  readonly stats: PodAddressStats = { lists: 0, resumes: 0 };

  constructor(
    private readonly client: KubeClient,
    readonly namespace: string,
  ) {}

  /** True once both lists are in: before that every address is nobody's. */
  get synced(): boolean {
    return this.podsSynced && this.claimsSynced;
  }

  /** The workshop whose pod has `address` now, or undefined (refuse the connection). */
  workshopAt(address: string): string | undefined {
    if (!this.synced) return undefined;
    const ip = normalizeAddress(address);
    let found: PodEntry | undefined;
    for (const pod of this.pods.values()) {
      if (!pod.ips.includes(ip)) continue;
      if (found) return undefined; // two live pods claim it: believe neither
      found = pod;
    }
    if (!found || found.hostNetwork) return undefined;
    if (found.workshop !== undefined) return found.workshop;
    return found.claimUid !== undefined ? this.claims.get(found.claimUid) : undefined;
  }

  /**
   * Lists and watches the namespace's pods and claims until `signal` aborts, resuming each watch
   * from its last resourceVersion and relisting on 410 Gone, as `watchStatuses` does.
   */
  async run(signal: AbortSignal, options: { timeoutSeconds?: number } = {}): Promise<void> {
    await Promise.all([
      this.follow<PodObject>(`/api/v1/namespaces/${this.namespace}/pods`, signal, options, {
        reset: () => this.pods.clear(),
        apply: (pod, deleted) => this.applyPod(pod, deleted),
        synced: () => (this.podsSynced = true),
      }),
      this.follow<KubeObject>(`/apis/${EXT}/namespaces/${this.namespace}/sandboxclaims`, signal, options, {
        reset: () => this.claims.clear(),
        apply: (claim, deleted) => {
          const uid = claim.metadata.uid;
          if (!uid) return;
          if (deleted) this.claims.delete(uid);
          else this.claims.set(uid, claim.metadata.name!);
        },
        synced: () => (this.claimsSynced = true),
      }),
    ]);
  }

  /** Resolves once both lists are in (or rejects when `signal` aborts first). */
  async whenSynced(signal: AbortSignal): Promise<void> {
    while (!this.synced) {
      signal.throwIfAborted();
      await sleep(50, undefined, { signal });
    }
  }

  private applyPod(pod: PodObject, deleted: boolean): void {
    const uid = pod.metadata.uid;
    if (!uid) return;
    const phase = pod.status?.phase;
    // A finished pod's address is the CNI's to give again; a deleted one's is gone.
    if (deleted || phase === 'Succeeded' || phase === 'Failed') {
      this.pods.delete(uid);
      return;
    }
    const ips = new Set<string>();
    if (pod.status?.podIP) ips.add(normalizeAddress(pod.status.podIP));
    for (const p of pod.status?.podIPs ?? []) ips.add(normalizeAddress(p.ip));
    const labels = pod.metadata.labels ?? {};
    this.pods.set(uid, {
      ips: [...ips],
      workshop: labels[WORKSHOP_LABEL],
      claimUid: labels[CLAIM_UID_LABEL],
      hostNetwork: pod.spec?.hostNetwork === true,
    });
  }

  /** `listAndWatch` of `path`: each list replaces what is held, then counts as synced. */
  private follow<T extends KubeObject>(
    path: string,
    signal: AbortSignal,
    options: { timeoutSeconds?: number },
    on: { reset: () => void; apply: (obj: T, deleted: boolean) => void; synced: () => void },
  ): Promise<void> {
    return this.client.listAndWatch<T>(
      path,
      {
        list: (items) => {
          on.reset();
          for (const obj of items) on.apply(obj, false);
          on.synced();
        },
        event: on.apply,
      },
      signal,
      { timeoutSeconds: options.timeoutSeconds, stats: this.stats },
    );
  }
}
