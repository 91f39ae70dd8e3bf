import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { MasterKey } from '../src/identity/index.js';
import type { KubeObject } from '../src/workshops/kubernetes/client.js';
import { workshopNetworkPolicy } from '../src/workshops/kubernetes/networkPolicy.js';
import { workshopPodSpec } from '../src/workshops/kubernetes/pod.js';
import { ControlPlane, k8sToolsBuild, runTool, type ToolRun } from './helpers/k8s.js';
import { REPO_ROOT } from './helpers/server.js';

/**
 * The Helm chart (deploy/helm/atelier) with the real `helm` and `kubectl` (scripts/k8s-tools.sh)
 * against a real API server (test/helpers/k8s.ts, API server only: etcd, kube-apiserver and the
 * agent-sandbox CRDs; no controller runs, so nothing the chart makes is reconciled here): lint,
 * rendering, a server-side dry run of everything it renders, a real install whose ServiceAccount's
 * permissions `kubectl auth can-i` checks, and the refusals (no agent-sandbox API, bad values).
 */

const CHART = join(REPO_ROOT, 'deploy', 'helm', 'atelier');
const NS = 'atelier';
const WORKSHOPS_NS = 'atelier-workshops';
const OTHER_NS = 'someone-else';
const AGENT_SANDBOX_APIS = [
  'agents.x-k8s.io/v1beta1/Sandbox',
  'extensions.agents.x-k8s.io/v1beta1/SandboxTemplate',
  'extensions.agents.x-k8s.io/v1beta1/SandboxClaim',
  'extensions.agents.x-k8s.io/v1beta1/SandboxWarmPool',
];
const API_FLAGS = AGENT_SANDBOX_APIS.flatMap((v) => ['--api-versions', v]);

/** Everything a production install would set differently from the defaults. */
const CUSTOM_VALUES = `
replicaCount: 3
image: { repository: registry.example/atelier, tag: "1.2.3", pullPolicy: Always }
database: { existingSecret: pg-url, key: dsn }
masterKey: { existingSecret: atelier-keys, key: key }
trustProxy: 10.0.0.0/8
ingress:
  enabled: true
  className: nginx
  host: atelier.test.example
  tlsSecretName: atelier-tls
workshops: { namespace: ${WORKSHOPS_NS} }
workshopResource: { enabled: true, owner: kube-controller }
profiles:
  - name: default
    image: registry.example/workshop:1
    warmPool: 2
  - name: isolated
    image: registry.example/workshop:1
    runtimeClassName: gvisor
    warmPool: 0
    disk: 50Gi
    storageClassName: fast-ssd
    readOnlyRootFilesystem: false
    resources:
      requests: { cpu: "1", memory: 2Gi }
      limits: { cpu: "4", memory: 8Gi }
`;

type Run = ToolRun;

type Container = {
  command: string[];
  args: string[];
  env: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  startupProbe: { httpGet: { path: string } };
  livenessProbe: { httpGet: { path: string } };
  readinessProbe: { httpGet: { path: string } };
  volumeMounts: { name: string; mountPath: string; readOnly?: boolean }[];
};
type Deployment = KubeObject & {
  kind: string;
  spec: {
    replicas: number;
    template: {
      spec: {
        serviceAccountName: string;
        initContainers: Container[];
        containers: Container[];
        volumes: { name: string; secret?: { secretName: string } }[];
      };
    };
  };
};
type Rendered = KubeObject & { kind: string; spec?: Record<string, unknown> };

describe('Helm chart deploy/helm/atelier on a real API server (helm and kubectl built from pinned modules)', { timeout: 900_000 }, () => {
  let cp: ControlPlane | undefined;
  let tools: { helm: string; kubectl: string };
  let home: string;
  let customValues: string;

  before(async () => {
    tools = k8sToolsBuild();
    home = mkdtempSync('/tmp/atelier-helm-');
    customValues = join(home, 'custom.yaml');
    writeFileSync(customValues, CUSTOM_VALUES);
    cp = await ControlPlane.start({ apiOnly: true });
    for (const name of [NS, WORKSHOPS_NS, OTHER_NS]) {
      await cp.client.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    }
  });
  after(async () => {
    await cp?.stop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  /** Runs a tool with its own HOME (helm's and kubectl's caches, discovery included) and the control plane's kubeconfig. */
  function run(bin: string, args: string[], input?: string): Promise<Run> {
    return runWith(bin, args, {}, input);
  }
  function runWith(bin: string, args: string[], extraEnv: Record<string, string>, input?: string): Promise<Run> {
    return runTool(bin, args, { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, KUBECONFIG: cp!.kubeconfig, ...extraEnv }, input);
  }
  const ok = (r: Run, what: string): string => {
    assert.equal(r.code, 0, `${what} failed (exit ${r.code}):\n${r.stderr}\n${r.stdout}`);
    return r.stdout;
  };
  const helm = (...args: string[]) => run(tools.helm, args);
  const kubectl = (args: string[], input?: string) => run(tools.kubectl, args, input);
  const render = async (...args: string[]) =>
    ok(await helm('template', 'atelier', CHART, '--namespace', NS, ...API_FLAGS, ...args), 'helm template');
  const objects = (yaml: string): Rendered[] =>
    parseAllDocuments(yaml)
      .map((d) => d.toJS() as Rendered | null)
      .filter((o): o is Rendered => o !== null);
  const find = <T extends Rendered>(list: Rendered[], kind: string, name?: string): T => {
    const found = list.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
    assert.ok(found, `no ${kind}${name ? ` ${name}` : ''} among ${list.map((o) => `${o.kind}/${o.metadata.name}`).join(', ')}`);
    return found as T;
  };
  const envOf = (c: Container, name: string) => c.env.find((e) => e.name === name);

  it('passes helm lint, with the default values and with custom ones', async () => {
    // helm lint has no --api-versions: the prerequisite check is tested below.
    const lint = ['lint', CHART, '--strict', '--set', 'checkPrerequisites=false'];
    ok(await helm(...lint), 'helm lint');
    ok(await helm(...lint, '--values', customValues), 'helm lint (custom values)');
  });

  it('renders the default values: a Deployment of 2 on the database Secret, probes on /healthz, no cluster-wide RBAC', async () => {
    const list = objects(await render());
    const kinds = list.map((o) => o.kind).sort();
    assert.deepEqual(kinds, [
      'ConfigMap',
      'Deployment',
      'NetworkPolicy',
      'Role',
      'Role',
      'RoleBinding',
      'RoleBinding',
      'SandboxTemplate',
      'SandboxWarmPool',
      'Service',
      'Service',
      'ServiceAccount',
    ]);
    const deployment = find<Deployment>(list, 'Deployment', 'atelier');
    assert.equal(deployment.spec.replicas, 2);
    const pod = deployment.spec.template.spec;
    assert.equal(pod.serviceAccountName, 'atelier');
    const server = pod.containers[0]!;
    assert.deepEqual(envOf(server, 'ATELIER_DATABASE_URL')?.valueFrom?.secretKeyRef, { name: 'atelier-database', key: 'url' });
    assert.equal(envOf(server, 'ATELIER_MASTER_KEY_FILE')?.value, '/var/lib/atelier/master.key');
    assert.equal(pod.volumes.find((v) => v.name === 'master-key')?.secret?.secretName, 'atelier-master-key');
    assert.equal(
      server.volumeMounts.find((m) => m.name === 'master-key'),
      undefined,
      'the Secret is mounted in the init container only',
    );
    const init = pod.initContainers[0]!;
    assert.deepEqual(
      init.volumeMounts.find((m) => m.name === 'master-key'),
      {
        name: 'master-key',
        mountPath: '/etc/atelier/master-key',
        readOnly: true,
      },
    );
    assert.equal(envOf(init, 'KEY_FROM')?.value, '/etc/atelier/master-key/master.key');
    assert.equal(envOf(init, 'KEY_TO')?.value, envOf(server, 'ATELIER_MASTER_KEY_FILE')?.value);
    assert.equal(server.startupProbe.httpGet.path, '/healthz');
    assert.equal(server.livenessProbe.httpGet.path, '/healthz');
    assert.equal(server.readinessProbe.httpGet.path, '/healthz');
    assert.ok(server.args.includes('--node-name=$(POD_NAME)'), 'each replica is a node named by its pod');
    assert.equal(envOf(server, 'ATELIER_PUBLIC_URL'), undefined);
    // The Workshop resource's controller is off by default: no variable for it, no right on its objects.
    assert.deepEqual(
      server.env.filter((e) => e.name.startsWith('ATELIER_K8S_')),
      [],
    );
    const rules = list.filter((o) => o.kind === 'Role').flatMap((o) => (o as unknown as { rules: { apiGroups: string[] }[] }).rules);
    assert.ok(!rules.some((r) => r.apiGroups.includes('atelier.dev')), 'no rule on workshops.atelier.dev');
    for (const o of list) assert.ok(!o.kind.startsWith('Cluster'), `${o.kind} is cluster-wide`);
    assert.deepEqual(find(list, 'SandboxWarmPool', 'default').spec, { replicas: 1, sandboxTemplateRef: { name: 'default' } });
  });

  it("renders the egress proxy: a ClusterIP Service on the server pods' egress port, which a workshop's NetworkPolicy allows", async () => {
    for (const port of [7879, 3128]) {
      const list = objects(await render('--set', `egressProxy.port=${port}`));
      const deployment = find<Deployment>(list, 'Deployment', 'atelier');
      const podLabels = (deployment.spec.template as unknown as { metadata: { labels: Record<string, string> } }).metadata.labels;
      const server = deployment.spec.template.spec.containers[0] as Container & { ports: { name: string; containerPort: number }[] };
      assert.equal(server.ports.find((p) => p.name === 'egress')?.containerPort, port);
      const service = find<
        Rendered & { spec: { type: string; selector: Record<string, string>; ports: { port: number; targetPort: string }[] } }
      >(list, 'Service', 'atelier-egress');
      assert.equal(service.spec.type, 'ClusterIP', 'a node port or load balancer would replace the source address');
      assert.deepEqual(
        service.spec.ports.map((p) => [p.port, p.targetPort]),
        [[port, 'egress']],
      );
      for (const [k, v] of Object.entries(service.spec.selector))
        assert.equal(podLabels[k], v, `the Service selects the server pods (${k})`);
      // The driver's network parameters as the chart implies them: the policy's only egress
      // besides DNS goes to exactly the pods and port the Service leads to.
      const policy = workshopNetworkPolicy(
        'ws-x',
        { 'atelier.dev/workshop': 'ws-x' },
        { apiVersion: 'v1', kind: 'Sandbox', name: 'ws-x', uid: 'u' },
        {
          server: { namespace: NS, podLabels: service.spec.selector },
          egressProxy: { namespace: NS, podLabels: service.spec.selector, ports: [port] },
        },
        {},
      ) as { spec: { egress: { to: { podSelector: { matchLabels: Record<string, string> } }[]; ports: { port: number }[] }[] } };
      const toProxy = policy.spec.egress[1]!;
      for (const [k, v] of Object.entries(toProxy.to[0]!.podSelector.matchLabels)) assert.equal(podLabels[k], v);
      assert.deepEqual(
        toProxy.ports.map((p) => p.port),
        [port],
      );
    }
  });

  it("copies the master key as the server wants it: the init container's own command, run here on a Secret-like file", async () => {
    const deployment = find<Deployment>(objects(await render()), 'Deployment');
    const init = deployment.spec.template.spec.initContainers[0]!;
    // As a Secret volume with fsGroup gives it: group-readable, which the server would chmod (and a
    // read-only volume refuses).
    const secretDir = join(home, 'secret');
    const dataDir = join(home, 'data');
    mkdirSync(secretDir);
    mkdirSync(dataDir);
    const key = randomBytes(32).toString('base64') + '\n';
    writeFileSync(join(secretDir, 'master.key'), key, { mode: 0o440 });
    for (let i = 0; i < 2; i++) {
      // Twice: an init container runs again when its pod restarts, over the same emptyDir.
      const env = { KEY_FROM: join(secretDir, 'master.key'), KEY_TO: join(dataDir, 'master.key') };
      const r = await runWith(init.command[0]!, init.command.slice(1), env);
      assert.equal(r.code, 0, r.stderr);
    }
    assert.equal(statSync(join(dataDir, 'master.key')).mode & 0o777, 0o600);
    assert.equal(readFileSync(join(dataDir, 'master.key'), 'utf8'), key);
    MasterKey.loadOrCreate(join(dataDir, 'master.key')); // the server's own loader takes it
  });

  it('renders custom values: replicas, Ingress and public URL, the workshops namespace, profiles with a runtime class', async () => {
    const list = objects(await render('--values', customValues));
    const deployment = find<Deployment>(list, 'Deployment');
    assert.equal(deployment.spec.replicas, 3);
    const server = deployment.spec.template.spec.containers[0]!;
    assert.deepEqual(envOf(server, 'ATELIER_DATABASE_URL')?.valueFrom?.secretKeyRef, { name: 'pg-url', key: 'dsn' });
    assert.equal(envOf(server, 'ATELIER_PUBLIC_URL')?.value, 'https://atelier.test.example');
    assert.equal(envOf(server, 'ATELIER_TRUST_PROXY')?.value, '10.0.0.0/8');
    // The Workshop resource's controller: the pod's service account, the workshops' namespace, the
    // Lease beside the server (test/kubernetes.workshops.test.ts runs the controller with these).
    assert.deepEqual(
      server.env.filter((e) => e.name.startsWith('ATELIER_K8S_')),
      [
        { name: 'ATELIER_K8S_KUBECONFIG', value: 'in-cluster' },
        { name: 'ATELIER_K8S_WORKSHOPS_NAMESPACE', value: WORKSHOPS_NS },
        { name: 'ATELIER_K8S_WORKSHOPS_OWNER', value: 'kube-controller' },
        { name: 'ATELIER_K8S_WORKSHOPS_TENANT', value: 'default' },
        { name: 'ATELIER_K8S_LEASE_NAMESPACE', value: NS },
      ],
    );
    const ingress = find<Rendered & { spec: { ingressClassName: string; tls: { secretName: string }[] } }>(list, 'Ingress');
    assert.equal(ingress.spec.ingressClassName, 'nginx');
    assert.equal(ingress.spec.tls[0]!.secretName, 'atelier-tls');
    const roles = list.filter((o) => o.kind === 'Role').map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
    assert.deepEqual(roles.sort(), [`${NS}/atelier-leader-election`, `${WORKSHOPS_NS}/atelier-workshops`].sort());
    const isolated = find<
      Rendered & { spec: { podTemplate: { spec: Record<string, unknown> & { containers: { resources: unknown }[] } } } }
    >(list, 'SandboxTemplate', 'isolated');
    assert.equal(isolated.metadata.namespace, WORKSHOPS_NS);
    assert.equal(isolated.spec.podTemplate.spec.runtimeClassName, 'gvisor');
    assert.equal(isolated.spec.podTemplate.spec.automountServiceAccountToken, false);
    assert.deepEqual(isolated.spec.podTemplate.spec.containers[0]!.resources, {
      requests: { cpu: '1', memory: '2Gi' },
      limits: { cpu: '4', memory: '8Gi' },
    });
    assert.equal(find(list, 'SandboxWarmPool', 'default').spec?.replicas, 2);
    assert.equal(find(list, 'SandboxWarmPool', 'isolated').spec?.replicas, 0);
    assert.equal(find(list, 'SandboxTemplate', 'default').spec?.podTemplate !== undefined, true);
    // The workspace volume, as the driver's applyProfile writes it: a claim template of the
    // profile's disk (10Gi by default) mounted at /workspace, writable by the container's group.
    type Workspace = { spec: { volumeClaimTemplates: { metadata: { name: string }; spec: Record<string, unknown> }[] } };
    const workspace = (name: string) => (find(list, 'SandboxTemplate', name) as unknown as Workspace).spec.volumeClaimTemplates;
    assert.deepEqual(workspace('isolated'), [
      {
        metadata: { name: 'workspace' },
        spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '50Gi' } }, storageClassName: 'fast-ssd' },
      },
    ]);
    assert.deepEqual(workspace('default')[0]!.spec, { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '10Gi' } } });
    // Each profile's pod exactly as the driver's applyProfile writes it (pod.ts), but for the
    // resources, which the chart writes as given: the read-only root filesystem with /tmp and the
    // home as the pod's volumes by default, a writable one (and neither volume) on request.
    const podSpec = (name: string) => {
      const spec = structuredClone(
        (find(list, 'SandboxTemplate', name) as unknown as { spec: { podTemplate: { spec: { containers: Record<string, unknown>[] } } } })
          .spec.podTemplate.spec,
      );
      for (const c of spec.containers) delete c.resources;
      return spec;
    };
    const driverSpec = (options: { image: string; runtimeClassName?: string; readOnlyRootFilesystem?: boolean }) => {
      const spec = workshopPodSpec({ ephemeralStorage: '1Gi', ...options }, { cpus: 1, memoryBytes: 2 ** 30, pids: 1024 }) as {
        containers: Record<string, unknown>[];
      };
      for (const c of spec.containers) delete c.resources;
      return spec;
    };
    assert.deepEqual(podSpec('default'), driverSpec({ image: 'registry.example/workshop:1' }));
    assert.deepEqual(
      podSpec('isolated'),
      driverSpec({ image: 'registry.example/workshop:1', runtimeClassName: 'gvisor', readOnlyRootFilesystem: false }),
    );
    const pod = isolated.spec.podTemplate.spec as { securityContext?: unknown; containers: { volumeMounts?: unknown }[] };
    assert.deepEqual(pod.securityContext, { fsGroup: 1000 });
    assert.deepEqual(pod.containers[0]!.volumeMounts, [{ name: 'workspace', mountPath: '/workspace' }]);
    // Each profile's baseline NetworkPolicy, as the driver's applyProfile writes it: its pods closed.
    const baseline = find(list, 'NetworkPolicy', 'atelier-profile-isolated');
    assert.equal(baseline.metadata.namespace, WORKSHOPS_NS);
    assert.deepEqual(baseline.spec, {
      podSelector: { matchLabels: { 'atelier.dev/profile': 'isolated' } },
      policyTypes: ['Ingress', 'Egress'],
    });
  });

  it('has the API server accept everything it renders (server-side dry run), with default and custom values', async () => {
    for (const values of [[], ['--values', customValues]]) {
      const yaml = await render(...values);
      const count = objects(yaml).length;
      const out = ok(await kubectl(['apply', '--dry-run=server', '-f', '-'], yaml), 'kubectl apply --dry-run=server');
      const accepted = out.split('\n').filter((l) => l.endsWith('(server dry run)'));
      assert.equal(accepted.length, count, `every object accepted:\n${out}`);
    }
    // The dry run is the API server's judgement, not a formality: a profile quantity the chart's
    // own schema lets through is refused by the SandboxTemplate CRD's schema, naming the field.
    const bad = await render(
      '--set',
      'profiles[0].name=default,profiles[0].image=x,profiles[0].warmPool=0,profiles[0].resources.limits.cpu=lots',
    );
    const refused = await kubectl(['apply', '--dry-run=server', '-f', '-'], bad);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /SandboxTemplate.*default.*is invalid.*resources\.limits\.cpu/s);
    // Nothing was made by the dry runs.
    const r = await kubectl(['get', 'deployments,sandboxtemplates,roles', '--namespace', NS, '-o', 'name']);
    assert.equal(ok(r, 'kubectl get').trim(), '');
  });

  it('refuses to render without the agent-sandbox API, naming what is missing and what to install', async () => {
    const none = await helm('template', 'atelier', CHART, '--namespace', NS);
    assert.notEqual(none.code, 0);
    assert.match(
      none.stderr,
      /the cluster does not serve agents\.x-k8s\.io\/v1beta1\/Sandbox, extensions\.agents\.x-k8s\.io\/v1beta1\/SandboxTemplate/,
    );
    assert.match(
      none.stderr,
      /install the agent-sandbox controller and its CRDs first \(kubernetes-sigs\/agent-sandbox v1\.0\.0 or newer, below v2/,
    );
    // The core API alone (a cluster with agent-sandbox's v1alpha1 only would look like this too).
    const partial = await helm('template', 'atelier', CHART, '--namespace', NS, '--api-versions', AGENT_SANDBOX_APIS[0]!);
    assert.notEqual(partial.code, 0);
    assert.match(partial.stderr, /does not serve extensions\.agents\.x-k8s\.io\/v1beta1\/SandboxTemplate/);
    assert.doesNotMatch(partial.stderr, /serve agents\.x-k8s\.io\/v1beta1\/Sandbox[,:]/);
    // Kubernetes older than the chart supports (Chart.yaml kubeVersion).
    const old = await helm('template', 'atelier', CHART, '--namespace', NS, ...API_FLAGS, '--kube-version', 'v1.30.0');
    assert.notEqual(old.code, 0);
    assert.match(old.stderr, /kubeVersion/);
    // Rendering for another cluster, on purpose.
    ok(await helm('template', 'atelier', CHART, '--namespace', NS, '--set', 'checkPrerequisites=false'), 'helm template without the check');
  });

  it('refuses bad values with the value that is wrong', async () => {
    const negative = await helm('template', 'atelier', CHART, ...API_FLAGS, '--set', 'profiles[0].warmPool=-1');
    assert.notEqual(negative.code, 0);
    assert.match(negative.stderr, /profiles\/0\/warmPool|warmPool/);
    const disk = await helm('template', 'atelier', CHART, ...API_FLAGS, '--set', 'profiles[0].disk=lots');
    assert.notEqual(disk.code, 0);
    assert.match(disk.stderr, /profiles\/0\/disk|disk/);
    const twice = await helm('template', 'atelier', CHART, ...API_FLAGS, '--values', customValues, '--set', 'profiles[1].name=default');
    assert.notEqual(twice.code, 0);
    assert.match(twice.stderr, /profiles: the name "default" is given twice/);
    const noDatabase = await helm('template', 'atelier', CHART, ...API_FLAGS, '--set', 'database.existingSecret=');
    assert.notEqual(noDatabase.code, 0);
    assert.match(noDatabase.stderr, /database\.existingSecret is required/);
    const noOwner = await helm('template', 'atelier', CHART, ...API_FLAGS, '--set', 'workshopResource.enabled=true');
    assert.notEqual(noOwner.code, 0);
    assert.match(noOwner.stderr, /workshopResource\.owner is required when workshopResource\.enabled/);
    const badOwner = await helm('template', 'atelier', CHART, ...API_FLAGS, '--set', 'workshopResource.owner=no one');
    assert.notEqual(badOwner.code, 0);
    assert.match(badOwner.stderr, /workshopResource\/owner|owner/);
  });

  it('installs on the real API server, its ServiceAccount may do what the driver needs in its namespace and nothing else, upgrades', async () => {
    // A real install: helm reads the API server's discovery (the agent-sandbox CRDs are there).
    ok(await helm('install', 'atelier', CHART, '--namespace', NS, '--values', customValues), 'helm install');
    const sa = `system:serviceaccount:${NS}:atelier`;
    const can = async (args: string[]) => {
      const r = await kubectl(['auth', 'can-i', '--as', sa, ...args]);
      assert.ok(r.code === 0 || r.code === 1, `kubectl auth can-i ${args.join(' ')}: ${r.stderr}`);
      return r.code === 0;
    };
    const allowed = [
      ['create', 'sandboxclaims.extensions.agents.x-k8s.io'],
      ['delete', 'sandboxclaims.extensions.agents.x-k8s.io'],
      ['update', 'sandboxtemplates.extensions.agents.x-k8s.io'],
      ['patch', 'sandboxwarmpools.extensions.agents.x-k8s.io'],
      ['watch', 'sandboxes.agents.x-k8s.io'],
      ['update', 'sandboxes.agents.x-k8s.io'],
      ['list', 'pods'],
      // The egress proxy's source-address mapping (src/workshops/kubernetes/podAddresses.ts).
      ['watch', 'pods'],
      ['watch', 'sandboxclaims.extensions.agents.x-k8s.io'],
      ['create', 'pods', '--subresource=exec'],
      ['create', 'pods', '--subresource=portforward'],
      ['get', 'pods', '--subresource=log'],
      ['delete', 'persistentvolumeclaims'],
      ['create', 'networkpolicies.networking.k8s.io'],
      ['watch', 'events'],
      // The Workshop resource's controller (on in these values).
      ['create', 'workshops.atelier.dev'],
      ['delete', 'workshops.atelier.dev'],
      ['watch', 'workshops.atelier.dev'],
      ['update', 'workshops.atelier.dev', '--subresource=status'],
      ['update', 'workshops.atelier.dev', '--subresource=finalizers'],
    ];
    for (const args of allowed)
      assert.equal(await can([...args, '--namespace', WORKSHOPS_NS]), true, `may ${args.join(' ')} in ${WORKSHOPS_NS}`);
    assert.equal(await can(['update', 'leases.coordination.k8s.io', '--namespace', NS]), true, 'may take the leader lease');
    const refused = [
      // The pod lifecycle is agent-sandbox's.
      ['create', 'pods', '--namespace', WORKSHOPS_NS],
      ['delete', 'pods', '--namespace', WORKSHOPS_NS],
      ['get', 'secrets', '--namespace', WORKSHOPS_NS],
      ['get', 'secrets', '--namespace', NS],
      ['get', 'secrets', '--namespace', OTHER_NS],
      ['get', 'secrets', '--namespace', 'kube-system'],
      ['create', 'sandboxclaims.extensions.agents.x-k8s.io', '--namespace', OTHER_NS],
      ['create', 'pods', '--subresource=exec', '--namespace', OTHER_NS],
      ['create', 'sandboxclaims.extensions.agents.x-k8s.io', '--namespace', NS],
      ['update', 'leases.coordination.k8s.io', '--namespace', WORKSHOPS_NS],
      ['create', 'rolebindings.rbac.authorization.k8s.io', '--namespace', WORKSHOPS_NS],
      ['update', 'roles.rbac.authorization.k8s.io', '--namespace', WORKSHOPS_NS],
      ['list', 'nodes'],
      ['list', 'namespaces'],
      ['get', 'clusterroles.rbac.authorization.k8s.io'],
      ['create', 'customresourcedefinitions.apiextensions.k8s.io'],
      ['list', 'sandboxes.agents.x-k8s.io', '--all-namespaces'],
      ['create', 'workshops.atelier.dev', '--namespace', NS],
      ['create', 'workshops.atelier.dev', '--namespace', OTHER_NS],
      ['list', 'workshops.atelier.dev', '--all-namespaces'],
    ];
    for (const args of refused) assert.equal(await can(args), false, `may not ${args.join(' ')}`);
    // An upgrade that changes a profile: the pool follows, and the replicas roll (the profiles' checksum).
    const checksum = async () =>
      ok(
        await kubectl([
          'get',
          'deployment/atelier',
          '--namespace',
          NS,
          '-o',
          `jsonpath={.spec.template.metadata.annotations['checksum/profiles']}`,
        ]),
        'kubectl get deployment',
      );
    const before = await checksum();
    writeFileSync(customValues, CUSTOM_VALUES.replace('warmPool: 2', 'warmPool: 3'));
    ok(await helm('upgrade', 'atelier', CHART, '--namespace', NS, '--values', customValues), 'helm upgrade');
    writeFileSync(customValues, CUSTOM_VALUES);
    const pool = await kubectl(['get', 'sandboxwarmpool/default', '--namespace', WORKSHOPS_NS, '-o', 'jsonpath={.spec.replicas}']);
    assert.equal(ok(pool, 'kubectl get sandboxwarmpool'), '3');
    assert.notEqual(await checksum(), before, 'the pod template changed with the profiles');
    ok(await helm('uninstall', 'atelier', '--namespace', NS), 'helm uninstall');
    for (const ns of [NS, WORKSHOPS_NS]) {
      const left = await kubectl([
        'get',
        'deployments,services,configmaps,serviceaccounts,roles,rolebindings,networkpolicies',
        '--namespace',
        ns,
        '-o',
        'name',
      ]);
      assert.equal(ok(left, 'kubectl get').trim(), '', `nothing of the release left in ${ns}`);
    }
  });

  it('refuses to install on a real API server that does not serve the agent-sandbox API', async () => {
    ok(await kubectl(['delete', 'crd', 'sandboxwarmpools.extensions.agents.x-k8s.io', '--wait=true']), 'kubectl delete crd');
    await cp!.until('discovery no longer lists SandboxWarmPool', async () => {
      const group = await cp!.client.request<{ resources: { kind: string }[] }>('GET', '/apis/extensions.agents.x-k8s.io/v1beta1');
      return !group.resources.some((r) => r.kind === 'SandboxWarmPool');
    });
    rmSync(join(home, '.kube', 'cache'), { recursive: true, force: true });
    const r = await helm('install', 'atelier', CHART, '--namespace', NS);
    assert.notEqual(r.code, 0);
    assert.match(
      r.stderr,
      /the cluster does not serve extensions\.agents\.x-k8s\.io\/v1beta1\/SandboxWarmPool: install the agent-sandbox controller/,
    );
    const status = await helm('status', 'atelier', '--namespace', NS);
    assert.match(status.stderr, /release: not found/, 'no release left behind');
  });
});
