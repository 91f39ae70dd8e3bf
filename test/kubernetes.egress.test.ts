import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { createHostsResolver, EgressProxy, type EgressDecision } from '../src/egress/index.js';
import { SourceAddressListener } from '../src/egress/sourceListener.js';
import type { KubeObject } from '../src/workshops/kubernetes/client.js';
import { normalizeAddress, PodAddresses } from '../src/workshops/kubernetes/podAddresses.js';
import { KubernetesSandboxes } from '../src/workshops/kubernetes/sandboxes.js';
import { ControlPlane, KWOK_NODE } from './helpers/k8s.js';

/**
 * The in-cluster egress proxy's knowledge of which workshop asks (docs/kubernetes.md, "The egress
 * proxy in the cluster"): the source address of a connection mapped to a workshop by the pod
 * that has it, as the real API server reports it (pods made by the real agent-sandbox controller
 * for the driver's claim and Sandbox, their IPs given by kwok from 127.1.0.0/24, which this host
 * can send from). Connections go through the real EgressProxy from each pod's address with
 * `localAddress`. What is not tested: a CNI's address assignment and its enforcement that a
 * container sends only from its pod's IP (kwok assigns addresses and runs no container).
 */

const NS = 'atelier-egress';
const POD_CIDR = '127.1.0.1/24';
const GI = 2 ** 30;
const DEFAULTS = { limits: { cpus: 1, memoryBytes: GI, pids: 512 }, diskBytes: GI };
const PROFILE = { name: 'default', image: 'atelier.invalid/workshop:test', warmPool: 1, defaults: DEFAULTS };
const NETWORK = {
  server: { namespace: 'atelier', podLabels: { 'app.kubernetes.io/name': 'atelier' } },
  egressProxy: { namespace: 'atelier', podLabels: { 'app.kubernetes.io/name': 'atelier' }, ports: [7879] },
};

type Pod = KubeObject & { status?: { phase?: string; podIP?: string } };

describe('the egress proxy identifies a workshop by its pod IP, from the real API server (kwok pods)', { timeout: 900_000 }, () => {
  let cp: ControlPlane | undefined;
  let stopBinding: (() => Promise<void>) | undefined;
  let sandboxes: KubernetesSandboxes;
  let addresses: PodAddresses;
  const stop = new AbortController();
  let following: Promise<void> | undefined;
  let proxy: EgressProxy;
  let shared: SourceAddressListener;
  let port: number;
  const decisions: { workshopId: string; d: EgressDecision }[] = [];
  const refused: string[] = [];

  before(async () => {
    cp = await ControlPlane.start({ podCidr: POD_CIDR });
    await cp.namespace(NS);
    stopBinding = cp.bindVolumes(NS);
    sandboxes = new KubernetesSandboxes(cp.client, NS, NETWORK);
    addresses = new PodAddresses(cp.client, NS);
    following = addresses.run(stop.signal);
    await addresses.whenSynced(stop.signal);
    proxy = new EgressProxy({
      resolver: createHostsResolver(new Map()),
      onDecision: (workshopId, d) => decisions.push({ workshopId, d }),
    });
    shared = new SourceAddressListener(
      proxy,
      (a) => addresses.workshopAt(a),
      (a) => refused.push(a),
    );
    port = await shared.listen(0, '127.0.0.1');
  });
  after(async () => {
    await shared?.close();
    stop.abort();
    await following;
    await stopBinding?.();
    await cp?.stop();
  });

  const api = () => cp!.client;
  const until = (what: string, check: () => Promise<boolean>) => cp!.until(what, check);
  const podOf = async (sandbox: string): Promise<Pod> => api().request<Pod>('GET', `/api/v1/namespaces/${NS}/pods/${sandbox}`);
  const sandboxOf = async (id: string): Promise<string> => (await sandboxes.status(id)).sandbox!;
  const runningIp = async (id: string): Promise<string> => {
    let ip = '';
    await until(`workshop ${id}'s pod has an IP`, async () => {
      if ((await sandboxes.status(id)).state !== 'Running') return false;
      const p = await podOf(await sandboxOf(id));
      ip = p.status?.podIP ?? '';
      return p.status?.phase === 'Running' && ip !== '';
    });
    return ip;
  };

  /** A proxy request sent from `from`; what came back before the proxy closed or answered. */
  function ask(from: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port, localAddress: from });
      let got = '';
      s.on('data', (d: Buffer) => {
        got += d.toString();
        if (got.includes('\r\n\r\n')) s.destroy();
      });
      s.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve(got) : reject(err)));
      s.on('close', () => resolve(got));
      s.on('connect', () => s.write('GET http://blocked.example/ HTTP/1.1\r\nHost: blocked.example\r\n\r\n'));
    });
  }

  it('a claimed workshop and a cold one are known by their pods’ IPs; an unclaimed warm pod and an unknown address are nobody', async () => {
    await sandboxes.applyProfile(PROFILE);
    await sandboxes.create('ws-egress01', PROFILE.name, DEFAULTS);
    await sandboxes.create('ws-egress02', PROFILE.name, { ...DEFAULTS, diskBytes: 2 * GI });
    const claimed = await runningIp('ws-egress01');
    const cold = await runningIp('ws-egress02');
    assert.match(claimed, /^127\.1\.0\.\d+$/, 'kwok gave the pod an address from the test range');
    assert.notEqual(claimed, cold);
    // The claimed pod is labelled by the claim's uid only; the cold one by the workshop label.
    const claimedPod = await podOf(await sandboxOf('ws-egress01'));
    assert.ok(claimedPod.metadata.labels?.['agents.x-k8s.io/claim-uid']);
    assert.equal(claimedPod.metadata.labels?.['atelier.dev/workshop'], undefined);
    await until(
      'the mapping saw both pods',
      async () => addresses.workshopAt(claimed) === 'ws-egress01' && addresses.workshopAt(cold) === 'ws-egress02',
    );
    assert.equal(addresses.workshopAt(`::ffff:${claimed}`), 'ws-egress01', 'an IPv4 client seen on a dual-stack socket');

    // The pool refills: its new warm pod has an address and no workshop.
    let warmIp = '';
    await until('the warm pool has a new pod with an IP', async () => {
      const pods = await api().request<{ items: Pod[] }>('GET', `/api/v1/namespaces/${NS}/pods`);
      const warm = pods.items.find(
        (p) => p.metadata.labels?.['agents.x-k8s.io/claim-uid'] === undefined && p.metadata.labels?.['atelier.dev/workshop'] === undefined,
      );
      warmIp = warm?.status?.podIP ?? '';
      return warmIp !== '';
    });
    assert.equal(addresses.workshopAt(warmIp), undefined, 'an unclaimed warm pod is nobody');
    assert.equal(addresses.workshopAt('127.1.0.250'), undefined, 'an address no pod has is nobody');
    assert.equal(normalizeAddress('::FFFF:10.0.0.5'), '10.0.0.5');
  });

  it('a host-network pod labelled as a workshop is nobody: its address is the node’s', async () => {
    const made = async (name: string, labels: Record<string, string>, hostNetwork: boolean): Promise<string> => {
      await api().request('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name, labels },
        spec: { nodeName: KWOK_NODE, hostNetwork, containers: [{ name: 'c', image: 'atelier.invalid/x:1' }] },
      });
      let ip = '';
      await until(`pod ${name} runs with an IP`, async () => {
        const p = await podOf(name);
        ip = p.status?.podIP ?? '';
        return p.status?.phase === 'Running' && ip !== '';
      });
      return ip;
    };
    const impostor = await made('impostor', { 'atelier.dev/workshop': 'ws-egress01' }, true);
    assert.equal(impostor, '127.0.0.1', "kwok gives a host-network pod its node's address");
    // Events of one watch come in order: once the later pod is mapped, the impostor was seen.
    const later = await made('later', { 'atelier.dev/workshop': 'ws-later' }, false);
    await until('the mapping saw the later pod', async () => addresses.workshopAt(later) === 'ws-later');
    assert.equal(addresses.workshopAt(impostor), undefined);
    for (const name of ['impostor', 'later'])
      await api().request('DELETE', `/api/v1/namespaces/${NS}/pods/${name}`, undefined, { query: { gracePeriodSeconds: '0' } });
    await until('the later pod is gone from the mapping', async () => addresses.workshopAt(later) === undefined);
  });

  it('the proxy judges a connection as the workshop its source address belongs to, and closes one from nobody unread', async () => {
    await shared.serve('ws-egress01');
    await shared.serve('ws-egress02');
    const claimed = await runningIp('ws-egress01');
    const cold = await runningIp('ws-egress02');
    decisions.length = 0;
    const answer = await ask(claimed);
    assert.match(answer, /^HTTP\/1\.1 403 /, answer);
    assert.deepEqual(
      decisions.map((x) => [x.workshopId, x.d.allowed]),
      [['ws-egress01', false]],
    );
    assert.match(decisions[0]!.d.target, /blocked\.example/);
    decisions.length = 0;
    assert.match(await ask(cold), /^HTTP\/1\.1 403 /);
    assert.deepEqual(
      decisions.map((x) => x.workshopId),
      ['ws-egress02'],
    );
    decisions.length = 0;
    refused.length = 0;
    assert.equal(await ask('127.1.0.250'), '', 'nothing answered to an address no pod has');
    assert.deepEqual(decisions, []);
    assert.deepEqual(refused.map(normalizeAddress), ['127.1.0.250']);
  });

  it('a deleted workshop’s address is nobody’s again, and a served workshop unserved is refused', async () => {
    const cold = await runningIp('ws-egress02');
    await sandboxes.delete('ws-egress02');
    await until('the mapping dropped the deleted pod', async () => addresses.workshopAt(cold) === undefined);
    decisions.length = 0;
    assert.equal(await ask(cold), '');
    const claimed = await runningIp('ws-egress01');
    await shared.unserve('ws-egress01');
    assert.equal(addresses.workshopAt(claimed), 'ws-egress01');
    assert.equal(await ask(claimed), '', 'known, but not served here: closed');
    assert.deepEqual(decisions, []);
    await sandboxes.delete('ws-egress01');
    // The mapping cost: one list per resource, watches resumed only when they end.
    assert.deepEqual(addresses.stats.lists, 2);
  });
});
