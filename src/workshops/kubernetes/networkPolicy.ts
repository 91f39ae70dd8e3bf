import type { KubeObject } from './client.js';

/**
 * The NetworkPolicy of one workshop pod (docs/kubernetes.md, "The NetworkPolicy"). The template
 * says `networkPolicyManagement: Unmanaged`, so agent-sandbox writes none: Atelier writes one per
 * workshop, owned by the workshop's object so the garbage collector removes it with the workshop.
 *
 * Ingress: only from the Atelier server's pods. Egress: only DNS to the cluster DNS and the egress
 * proxy's ports, which decides (and records) everything else. No `ipBlock` anywhere, so no node,
 * no other pod and no metadata address (169.254.169.254) is reachable. A NetworkPolicy is only
 * as good as the CNI that enforces it: one that does not (kindnet, flannel alone) ignores it.
 */

/** Pods of some namespace chosen by labels: the server's, the proxy's, the DNS server's. */
export interface PodPeer {
  namespace: string;
  podLabels: Record<string, string>;
}

/** Who a workshop pod may talk to: a parameter of the driver (the chart knows the names). */
export interface WorkshopNetwork {
  /** The Atelier server's pods: the only peers that may open a connection to a workshop pod. */
  server: PodPeer;
  /** The egress proxy's pods and the ports it listens on: the only destination besides DNS. */
  egressProxy: PodPeer & { ports: number[] };
  /** The cluster DNS; `kube-system`, `k8s-app: kube-dns` (CoreDNS's usual labels) when unset. */
  dns?: PodPeer;
}

const CLUSTER_DNS: PodPeer = { namespace: 'kube-system', podLabels: { 'k8s-app': 'kube-dns' } };

function peer(p: PodPeer): Record<string, unknown> {
  // A namespace is matched by the label the API server sets on every namespace since 1.22.
  return {
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': p.namespace } },
    podSelector: { matchLabels: p.podLabels },
  };
}

/** The policy named after workshop `id`, selecting exactly `podLabels`, owned by `owner`. */
export function workshopNetworkPolicy(
  id: string,
  podLabels: Record<string, string>,
  owner: { apiVersion: string; kind: string; name: string; uid: string },
  network: WorkshopNetwork,
  labels: Record<string, string>,
): KubeObject & { spec: unknown } {
  const dns = network.dns ?? CLUSTER_DNS;
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: id, labels, ownerReferences: [{ ...owner, controller: true }] },
    spec: {
      podSelector: { matchLabels: podLabels },
      policyTypes: ['Ingress', 'Egress'],
      ingress: [{ from: [peer(network.server)] }],
      egress: [
        {
          to: [peer(dns)],
          ports: [
            { protocol: 'UDP', port: 53 },
            { protocol: 'TCP', port: 53 },
          ],
        },
        { to: [peer(network.egressProxy)], ports: network.egressProxy.ports.map((port) => ({ protocol: 'TCP', port })) },
      ],
    },
  };
}

/** The name of a profile's baseline policy (a workshop's is its id, `ws-…`). */
export function profilePolicyName(profile: string): string {
  return `atelier-profile-${profile}`;
}

/**
 * A profile's baseline: every pod of the profile (label `atelier.dev/profile`) may send and
 * receive nothing. NetworkPolicies add up (a pod may do what any policy selecting it allows), so
 * a claimed pod gets exactly its workshop policy's rules; a warm pod, which no workshop policy
 * selects until a claim adopts it, gets none.
 */
export function profileNetworkPolicy(profile: string, podLabels: Record<string, string>): KubeObject & { spec: unknown } {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: profilePolicyName(profile), labels: podLabels },
    spec: { podSelector: { matchLabels: podLabels }, policyTypes: ['Ingress', 'Egress'] },
  };
}
