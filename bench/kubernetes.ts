/**
 * 17. Kubernetes (docs/kubernetes.md): the driver's objects against the test control plane
 * (test/helpers/k8s.ts: kube-apiserver, kube-controller-manager and kube-scheduler built from
 * k8s.io/kubernetes, etcd, the agent-sandbox controller; kwok plays the node and its pods, so no
 * container starts and no image is pulled: the figures are the control plane's share of a create).
 *
 * - create → workshop Running, from a profile's warm pool and cold (a pool of 0), p50/p99, beside
 *   a bare agent-sandbox `Sandbox` posted straight to the API (the peer: what agent-sandbox alone
 *   costs, in the same run) and beside the agent-sandbox project's own claim-latency target
 *   (p50 1 s, p99 5 s). "Running" is read from the driver's own watch (`watchStatuses`), as the
 *   server would read it.
 * - The control plane's load per workshop: the API server's own counters
 *   (`apiserver_request_total`, `apiserver_watch_events_total` from its /metrics), over the creates
 *   (the warm pool's refill included, the benchmark's own polling subtracted) and over two idle
 *   windows, one before any workshop exists and one with every workshop of the run idle; from
 *   them, what 10,000 workshops cost the API server (printed, and written in the README).
 *
 * It ignores the Atelier server the runner starts: the Kubernetes driver is not wired into it yet.
 */
import https from 'node:https';
import { KubeClient, readKubeconfig, type KubeObject } from '../src/workshops/kubernetes/client.js';
import { KubernetesSandboxes, WORKSHOP_LABEL, type KubeWorkshopStatus } from '../src/workshops/kubernetes/sandboxes.js';
import { ControlPlane } from '../test/helpers/k8s.js';
import { goalLine, heading, line, ms, sleep, statLine, summarize } from './lib.js';

const NS = 'atelier-bench';
const RUNS = 20;
/** Each idle window: the control plane's requests and watch events with nothing being created. */
const IDLE_WINDOW_MS = 60_000;
const GI = 2 ** 30;
const SHAPE = { limits: { cpus: 1, memoryBytes: GI, pids: 512 }, diskBytes: GI };
const IMAGE = 'atelier.invalid/workshop:bench';
/** agent-sandbox's own target for a claim served from a warm pool. */
const TARGET_P50_MS = 1000;
const TARGET_P99_MS = 5000;
const NETWORK = {
  server: { namespace: 'atelier', podLabels: { 'app.kubernetes.io/name': 'atelier' } },
  egressProxy: { namespace: 'atelier', podLabels: { 'app.kubernetes.io/component': 'egress-proxy' }, ports: [3128, 1080] },
};
const SANDBOXES = `/apis/agents.x-k8s.io/v1beta1/namespaces/${NS}/sandboxes`;

type Conditioned = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };

/** Counts the requests a client sends (the driver's own, or this benchmark's polling). */
function countRequests(client: KubeClient): { n: number } {
  const counter = { n: 0 };
  const send = client.request.bind(client);
  client.request = ((...args: Parameters<KubeClient['request']>) => {
    counter.n++;
    return send(...args);
  }) as KubeClient['request'];
  return counter;
}

interface Counters {
  requests: number;
  /** Requests by verb (GET, LIST, WATCH, POST, PUT, PATCH, DELETE…). */
  byVerb: Map<string, number>;
  watchEvents: number;
}

/** The API server's request and watch-event counters (resource requests only: /metrics itself is not one). */
async function scrape(kubeconfig: string): Promise<Counters> {
  const c = readKubeconfig(kubeconfig);
  const text = await new Promise<string>((resolve, reject) => {
    const req = https.request(new URL('/metrics', c.server), { ca: c.ca, cert: c.cert, key: c.key }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        res.statusCode === 200 ? resolve(Buffer.concat(chunks).toString()) : reject(new Error(`/metrics: ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end();
  });
  const out: Counters = { requests: 0, byVerb: new Map(), watchEvents: 0 };
  for (const l of text.split('\n')) {
    const m = /^(apiserver_request_total|apiserver_watch_events_total)\{([^}]*)\} (\S+)$/.exec(l);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    const value = Number(m[3]);
    if (m[1] === 'apiserver_watch_events_total') out.watchEvents += value;
    else if (labels.resource) {
      out.requests += value;
      out.byVerb.set(labels.verb!, (out.byVerb.get(labels.verb!) ?? 0) + value);
    }
  }
  return out;
}

function minus(a: Counters, b: Counters): Counters {
  const byVerb = new Map<string, number>();
  for (const [verb, n] of a.byVerb) byVerb.set(verb, n - (b.byVerb.get(verb) ?? 0));
  return { requests: a.requests - b.requests, byVerb, watchEvents: a.watchEvents - b.watchEvents };
}

function verbs(c: Counters, per: number): string {
  return [...c.byVerb]
    .filter(([, n]) => n > 0)
    .sort((x, y) => y[1] - x[1])
    .map(([verb, n]) => `${verb} ${(n / per).toFixed(1)}`)
    .join(', ');
}

function ready(obj: Conditioned): boolean {
  return obj.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export async function kubernetes(): Promise<Record<string, unknown>> {
  heading(`17. Kubernetes: create → Running (${RUNS} runs each) and the control plane's load per workshop (real API server, kwok node)`);
  const cp = await ControlPlane.start();
  const stopWatch = new AbortController();
  let watching: Promise<void> | undefined;
  let stopBinding: (() => Promise<void>) | undefined;
  try {
    await cp.namespace(NS);
    stopBinding = cp.bindVolumes(NS);
    // The driver has a client of its own, so that its requests are told apart from this benchmark's polling.
    const driverClient = new KubeClient(readKubeconfig(cp.kubeconfig));
    const driverRequests = countRequests(driverClient);
    const ownRequests = countRequests(cp.client);
    const sandboxes = new KubernetesSandboxes(driverClient, NS, NETWORK);

    const waiting = new Map<string, () => void>();
    /** The Sandbox serving each workshop, as the watch reported it Running. */
    const servedBy = new Map<string, string>();
    watching = sandboxes.watchStatuses((id: string, status: KubeWorkshopStatus) => {
      if (status.state !== 'Running') return;
      if (status.sandbox) servedBy.set(id, status.sandbox);
      waiting.get(id)?.();
    }, stopWatch.signal);
    const running = (id: string) => new Promise<void>((resolve) => waiting.set(id, resolve));
    const timed = async (id: string, create: () => Promise<unknown>): Promise<number> => {
      const done = running(id);
      const t0 = performance.now();
      await create();
      await Promise.race([done, sleep(60_000).then(() => Promise.reject(new Error(`${id} not Running after 60 s`)))]);
      waiting.delete(id);
      return performance.now() - t0;
    };
    const unclaimedWarm = async (): Promise<number> => {
      const list = await cp.client.request<{ items: Conditioned[] }>('GET', SANDBOXES, undefined, {
        query: { labelSelector: 'agents.x-k8s.io/launch-type=warm' },
      });
      return list.items.filter((sb) => ready(sb) && !sb.metadata.ownerReferences?.some((o) => o.kind === 'SandboxClaim')).length;
    };

    /** The API server's counters over an idle window, this benchmark's own requests (the volume binder's polling) taken out. */
    const idleWindow = async (): Promise<Counters> => {
      const before = await scrape(cp.kubeconfig);
      const own = ownRequests.n;
      await sleep(IDLE_WINDOW_MS);
      const delta = minus(await scrape(cp.kubeconfig), before);
      const ownInWindow = ownRequests.n - own;
      // The binder lists claims and volumes: its requests are LISTs.
      delta.requests -= ownInWindow;
      delta.byVerb.set('LIST', (delta.byVerb.get('LIST') ?? 0) - ownInWindow);
      return delta;
    };

    await sandboxes.applyProfile({ name: 'warm', image: IMAGE, warmPool: 2, defaults: SHAPE });
    await sandboxes.applyProfile({ name: 'cold', image: IMAGE, warmPool: 0, defaults: SHAPE });
    await cp.until('the warm pool is full', async () => (await unclaimedWarm()) >= 2);

    // Idle, no workshop: what the control plane does by itself (leases, heartbeats, the pools).
    const idle0 = await idleWindow();

    // Warm: each create finds a ready sandbox in the pool (the pool refills between runs).
    const warm: number[] = [];
    const warmCost0 = await scrape(cp.kubeconfig);
    const own0 = ownRequests.n;
    const driver0 = driverRequests.n;
    let adopted = 0;
    for (let i = 0; i < RUNS; i++) {
      await cp.until('a warm sandbox is ready', async () => (await unclaimedWarm()) >= 1);
      const id = `ws-warm${String(i).padStart(4, '0')}`;
      warm.push(await timed(id, () => sandboxes.create(id, 'warm', SHAPE)));
      const sb = await cp.client.request<KubeObject>('GET', `${SANDBOXES}/${servedBy.get(id)!}`);
      if (sb.metadata.labels?.['agents.x-k8s.io/launch-type'] === 'warm') adopted++;
    }
    await cp.until('the warm pool has refilled', async () => (await unclaimedWarm()) >= 2);
    await sleep(2000);
    const warmCost = minus(await scrape(cp.kubeconfig), warmCost0);
    const warmOwn = ownRequests.n - own0;
    const warmDriver = driverRequests.n - driver0;

    // Cold, alternated with the peer: a bare Sandbox from agent-sandbox alone.
    const cold: number[] = [];
    const peer: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const id = `ws-cold${String(i).padStart(4, '0')}`;
      cold.push(await timed(id, () => sandboxes.create(id, 'cold', SHAPE)));
      const name = `peer-${String(i).padStart(4, '0')}`;
      peer.push(
        await timed(name, () =>
          cp.client.request('POST', SANDBOXES, {
            apiVersion: 'agents.x-k8s.io/v1beta1',
            kind: 'Sandbox',
            // Labelled so that the same watch reports it: one way of reading Running for both.
            metadata: { name, labels: { [WORKSHOP_LABEL]: name } },
            spec: { podTemplate: { spec: { containers: [{ name: 'workshop', image: IMAGE }] } } },
          }),
        ),
      );
    }

    // The objects one workshop keeps in etcd (as JSON, which is what etcd stores for custom
    // resources; built-in kinds are stored as protobuf, smaller).
    const one = 'ws-warm0000';
    const objectPaths = [
      `/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/${NS}/sandboxclaims/${one}`,
      `${SANDBOXES}/${servedBy.get(one)!}`,
      `/api/v1/namespaces/${NS}/pods/${servedBy.get(one)!}`,
      `/api/v1/namespaces/${NS}/persistentvolumeclaims/workspace-${servedBy.get(one)!}`,
      `/apis/networking.k8s.io/v1/namespaces/${NS}/networkpolicies/${one}`,
    ];
    let objectBytes = 0;
    for (const path of objectPaths) objectBytes += JSON.stringify(await cp.client.request('GET', path)).length;

    // The peer's sandboxes go before the idle window, so that it holds workshops only.
    for (let i = 0; i < RUNS; i++) await cp.client.request('DELETE', `${SANDBOXES}/peer-${String(i).padStart(4, '0')}`);
    await cp.until(
      "the peer's pods are gone",
      async () => {
        const pods = await cp.client.request<{ items: KubeObject[] }>('GET', `/api/v1/namespaces/${NS}/pods`);
        return !pods.items.some((pod) => pod.metadata.name!.startsWith('peer-'));
      },
      600_000,
    );
    // Idle, with every workshop of the run in place.
    await sleep(5000);
    const workshops = 2 * RUNS;
    const idle1 = await idleWindow();

    const w = summarize(warm);
    const c = summarize(cold);
    const p = summarize(peer);
    statLine('atelier', `create → Running, warm pool (${adopted}/${RUNS} adopted a warm sandbox)`, w, ['p50', 'p99']);
    statLine('atelier', 'create → Running, cold (pool of 0: claim → new Sandbox)', c, ['p50', 'p99']);
    statLine('(peer)', 'bare agent-sandbox Sandbox POST → Ready', p, ['p50', 'p99']);
    line(
      "(kwok's pod stages wait about 1 s each before a new pod is Running and Ready, as a kubelet pulling and starting a container would: a cold figure is mostly that)",
    );
    line(`(target) agent-sandbox's claim latency: p50 ${ms(TARGET_P50_MS)}, p99 ${ms(TARGET_P99_MS)}`);
    goalLine('warm create p50 within the agent-sandbox target', w.p50, TARGET_P50_MS);
    goalLine('warm create p99 within the agent-sandbox target', w.p99, TARGET_P99_MS);

    const perCreate = (warmCost.requests - warmOwn) / RUNS;
    line(
      `per warm create (the pool's refill included): ${perCreate.toFixed(1)} API requests (the total by verb, this benchmark's polling included: ${verbs(warmCost, RUNS)}; this benchmark's own ${(warmOwn / RUNS).toFixed(1)} subtracted from the total), ` +
        `of them the driver's ${(warmDriver / RUNS).toFixed(1)}; ${(warmCost.watchEvents / RUNS).toFixed(1)} watch events sent`,
    );
    const hour = 3_600_000 / IDLE_WINDOW_MS;
    const idleRequests = ((idle1.requests - idle0.requests) / workshops) * hour;
    const idleEvents = ((idle1.watchEvents - idle0.watchEvents) / workshops) * hour;
    line(
      `idle, no workshop: ${((idle0.requests * hour) / 3600).toFixed(2)} requests/s, ${((idle0.watchEvents * hour) / 3600).toFixed(2)} watch events/s (${verbs(idle0, IDLE_WINDOW_MS / 1000)} per s)`,
    );
    line(
      `idle, ${workshops} workshops: ${((idle1.requests * hour) / 3600).toFixed(2)} requests/s, ${((idle1.watchEvents * hour) / 3600).toFixed(2)} watch events/s`,
    );
    line(
      `per idle workshop-hour: ${idleRequests.toFixed(1)} API requests, ${idleEvents.toFixed(1)} watch events (the difference of the two windows, over ${workshops} workshops)`,
    );
    // 10,000 workshops: the idle load, plus a tenth of them created (and deleted) each hour.
    line(
      `one workshop's objects (claim, Sandbox, pod, volume claim, NetworkPolicy): ${(objectBytes / 1024).toFixed(1)} KiB as JSON; 10,000 workshops: ${((objectBytes * 10_000) / 2 ** 20).toFixed(0)} MiB in etcd (of its 2 GiB default quota, 8 GiB recommended maximum)`,
    );
    const N = 10_000;
    const idleRps = (Math.max(idleRequests, 0) * N) / 3600;
    // Deleting every workshop: the claims (or Sandboxes) go, the garbage collector does the rest.
    const del0 = await scrape(cp.kubeconfig);
    const ownDel0 = ownRequests.n;
    for (let i = 0; i < RUNS; i++) {
      await sandboxes.delete(`ws-warm${String(i).padStart(4, '0')}`);
      await sandboxes.delete(`ws-cold${String(i).padStart(4, '0')}`);
    }
    // The pods of the deleted workshops' Sandboxes (not the peer's, which stay until the control plane stops).
    const served = new Set([...servedBy].filter(([id]) => id.startsWith('ws-')).map(([, sandbox]) => sandbox));
    await cp.until(
      'every workshop pod is gone',
      async () => {
        const pods = await cp.client.request<{ items: KubeObject[] }>('GET', `/api/v1/namespaces/${NS}/pods`);
        return !pods.items.some((pod) => served.has(pod.metadata.name!));
      },
      600_000,
    );
    await sleep(2000);
    const delCost = minus(await scrape(cp.kubeconfig), del0);
    const perDelete = (delCost.requests - (ownRequests.n - ownDel0)) / workshops;
    line(
      `per delete (the garbage collector's work included): ${perDelete.toFixed(1)} API requests, ${(delCost.watchEvents / workshops).toFixed(1)} watch events`,
    );

    const churnRps = ((perCreate + perDelete) * (N / 10)) / 3600;
    line(
      `10,000 workshops: idle ${idleRps.toFixed(2)} requests/s to the API server; with a tenth of them replaced each hour (1,000 creates and 1,000 deletes) ${churnRps.toFixed(2)} requests/s more`,
    );
    return {
      warm: w,
      cold: c,
      peer: p,
      adopted,
      perCreate: { requests: perCreate, watchEvents: warmCost.watchEvents / RUNS, driver: warmDriver / RUNS },
      idlePerWorkshopHour: { requests: idleRequests, watchEvents: idleEvents },
      idleBaselinePerSecond: {
        requests: idle0.requests / (IDLE_WINDOW_MS / 1000),
        watchEvents: idle0.watchEvents / (IDLE_WINDOW_MS / 1000),
      },
      perDelete: { requests: perDelete, watchEvents: delCost.watchEvents / workshops },
      objectBytes,
      tenThousand: { idleRps, churnRps },
    };
  } finally {
    stopWatch.abort();
    await watching?.catch(() => undefined);
    await stopBinding?.();
    await cp.stop();
  }
}
