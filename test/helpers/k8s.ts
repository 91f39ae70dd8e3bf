import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseAllDocuments } from 'yaml';
import { KubeApiError, KubeClient, readKubeconfig, type KubeObject } from '../../src/workshops/kubernetes/client.js';
import { REPO_ROOT } from './server.js';

/**
 * A real Kubernetes control plane on loopback for the Kubernetes driver's tests (docs/kubernetes.md):
 * etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from k8s.io/kubernetes,
 * kwok playing one node and its pods' lifecycle, and the agent-sandbox controller with its CRDs,
 * all from the pinned modules that scripts/k8s-control-plane.sh builds. Nothing here is a mock:
 * only the node (kwok) has no container runtime behind it.
 */

/** The fake node kwok plays; pods are scheduled onto it by the real scheduler. */
export const KWOK_NODE = 'kwok-node-0';
const MAX_RESTARTS = 5;
const NODE_RESOURCES = { cpu: '1k', memory: '1Ti', pods: '1M', 'ephemeral-storage': '1Ti' };

/** Builds (or finds in the cache) the pinned control plane; returns its directory (bin/, crds/, stages/). */
export function controlPlaneBuild(): string {
  const out = execFileSync(join(REPO_ROOT, 'scripts', 'k8s-control-plane.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  return out.trim().split('\n').pop()!;
}

/** Builds (or finds in the cache) the pinned `helm` and `kubectl` (scripts/k8s-tools.sh); returns their paths. */
export function k8sToolsBuild(): { helm: string; kubectl: string } {
  const out = execFileSync(join(REPO_ROOT, 'scripts', 'k8s-tools.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const dir = out.trim().split('\n').pop()!;
  return { helm: join(dir, 'bin', 'helm'), kubectl: join(dir, 'bin', 'kubectl') };
}

export interface ControlPlaneOptions {
  /**
   * Only etcd and the API server, with the agent-sandbox CRDs: enough for what the API server
   * alone decides (schemas, admission, RBAC, server-side dry runs), without the controllers,
   * the scheduler and kwok, which would only add load.
   */
  apiOnly?: boolean;
  /**
   * Where kwok takes its pods' IPs (default 10.244.0.1/24). A range in 127.0.0.0/8 gives pods
   * addresses this host can send from (`localAddress`), as a pod sends from its own IP.
   */
  podCidr?: string;
}

interface Component {
  name: string;
  argv: string[];
  env?: Record<string, string>;
  child?: ChildProcess;
  exited?: Promise<void>;
  /** Being stopped on purpose: not restarted. */
  stopping?: boolean;
  /** Times it exited by itself and was started again. */
  restarts: number;
}

export class ControlPlane {
  readonly client: KubeClient;
  private readonly components = new Map<string, Component>();

  private constructor(
    /** The build: bin/, crds/, stages/. */
    readonly build: string,
    /** This control plane's files: certificates, kubeconfig, etcd's data, the logs. */
    readonly dir: string,
    readonly kubeconfig: string,
    /**
     * `forward`: where kwok sends every `pods/portforward` connection (any pod, any port but 1):
     * a test listens there on 127.0.0.1 as the pod's server. `unreachable`: where port 1 goes,
     * nothing listens (a dial that fails).
     */
    readonly ports: { etcd: number; etcdPeer: number; apiserver: number; kwok: number; forward: number; unreachable: number },
  ) {
    this.client = new KubeClient(readKubeconfig(kubeconfig));
  }

  /**
   * Starts everything and waits until the API server is ready, the agent-sandbox CRDs are
   * established and kwok's node is Ready (with `apiOnly`: etcd, the API server and the CRDs).
   * Stops what it started if any step fails.
   */
  static async start(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
    const build = controlPlaneBuild();
    const dir = mkdtempSync('/tmp/atelier-k8s-');
    mkdirSync(join(dir, 'logs'));
    const ports = {
      etcd: await freePort(),
      etcdPeer: await freePort(),
      apiserver: await freePort(),
      kwok: await freePort(),
      forward: await freePort(),
      unreachable: await freePort(),
    };
    makeCertificates(dir);
    const kubeconfig = writeKubeconfig(dir, ports.apiserver);
    const cp = new ControlPlane(build, dir, kubeconfig, ports);
    try {
      await cp.boot(options);
    } catch (err) {
      const logs = cp.logTails();
      await cp.stop();
      throw new Error(`the test control plane did not start: ${(err as Error).message}\n${logs}`, { cause: err });
    }
    return cp;
  }

  private async boot(options: ControlPlaneOptions): Promise<void> {
    const { dir, build, ports } = this;
    const bin = (name: string) => join(build, 'bin', name);
    const file = (name: string) => join(dir, name);
    this.define('etcd', [
      bin('etcd'),
      '--name=default',
      `--data-dir=${file('etcd')}`,
      `--listen-client-urls=http://127.0.0.1:${ports.etcd}`,
      `--advertise-client-urls=http://127.0.0.1:${ports.etcd}`,
      `--listen-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
      `--initial-cluster=default=http://127.0.0.1:${ports.etcdPeer}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ]);
    this.define('kube-apiserver', [
      bin('kube-apiserver'),
      `--etcd-servers=http://127.0.0.1:${ports.etcd}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--secure-port=${ports.apiserver}`,
      `--cert-dir=${file('apiserver-certs')}`,
      `--tls-cert-file=${file('apiserver.crt')}`,
      `--tls-private-key-file=${file('apiserver.key')}`,
      `--client-ca-file=${file('ca.crt')}`,
      `--service-account-issuer=https://kubernetes.default.svc`,
      `--service-account-key-file=${file('sa.pub')}`,
      `--service-account-signing-key-file=${file('sa.key')}`,
      '--service-cluster-ip-range=10.96.0.0/16',
      '--authorization-mode=RBAC',
      // The "kubernetes" Service's endpoints would name a loopback address, which the API rejects.
      '--endpoint-reconciler-type=none',
      // pods/exec and pods/portforward go to kwok's kubelet endpoint on loopback.
      `--kubelet-client-certificate=${file('admin.crt')}`,
      `--kubelet-client-key=${file('admin.key')}`,
      '--kubelet-preferred-address-types=InternalIP',
      '--profiling=false',
      // The audit log of the streaming requests only (their URL carries the exec's command):
      // a test reads what the API server recorded of them.
      `--audit-policy-file=${writeAuditPolicy(dir)}`,
      `--audit-log-path=${this.auditLog}`,
      '--audit-log-format=json',
      '--audit-log-maxbackup=1',
    ]);
    await this.launch('etcd');
    await this.launch('kube-apiserver');
    await this.until('the API server is ready', () => this.apiReady());
    await this.applyCrds();
    if (options.apiOnly) return;
    const kc = `--kubeconfig=${this.kubeconfig}`;
    this.define('kube-controller-manager', [
      bin('kube-controller-manager'),
      kc,
      '--bind-address=127.0.0.1',
      '--secure-port=0',
      '--leader-elect=false',
      `--service-account-private-key-file=${file('sa.key')}`,
      `--root-ca-file=${file('ca.crt')}`,
    ]);
    this.define('kube-scheduler', [bin('kube-scheduler'), kc, '--bind-address=127.0.0.1', '--secure-port=0', '--leader-elect=false']);
    writeKwokConfig(dir, build, ports);
    this.define('kwok', [
      bin('kwok'),
      kc,
      `--config=${file('kwok.yaml')}`,
      '--manage-all-nodes=false',
      '--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake',
      '--node-ip=127.0.0.1',
      `--node-port=${ports.kwok}`,
      `--server-address=127.0.0.1:${ports.kwok}`,
      `--tls-cert-file=${file('kwok.crt')}`,
      `--tls-private-key-file=${file('kwok.key')}`,
      `--cidr=${options.podCidr ?? '10.244.0.1/24'}`,
      // Renew the node's Lease, as a kubelet does. Without it (the flag's default is 0 when no
      // KwokConfiguration is given) the node controller finds the node silent after its grace
      // period, marks it and every pod on it not Ready, and kwok's stages make it Ready again
      // seconds later: the node and its pods flapped about once a minute.
      '--node-lease-duration-seconds=40',
    ]);
    this.define('agent-sandbox-controller', [
      bin('agent-sandbox-controller'),
      '--extensions',
      '--leader-elect=false',
      '--metrics-bind-address=0',
      '--health-probe-bind-address=0',
    ]);
    for (const name of ['kube-controller-manager', 'kube-scheduler', 'kwok', 'agent-sandbox-controller']) await this.launch(name);
    await this.client.request('POST', '/api/v1/nodes', {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: KWOK_NODE,
        annotations: { 'kwok.x-k8s.io/node': 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
        labels: { 'kubernetes.io/hostname': KWOK_NODE, type: 'kwok' },
      },
      // kwok's own default resources without ephemeral storage, which the workshop pods ask for
      // (kwok keeps what the node says it has).
      status: { capacity: NODE_RESOURCES, allocatable: NODE_RESOURCES },
    });
    await this.until(`node ${KWOK_NODE} is Ready`, async () => {
      const node = await this.client.request<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
        'GET',
        `/api/v1/nodes/${KWOK_NODE}`,
      );
      return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
    });
    // The ServiceAccount admission plugin refuses pods until the namespace's default account exists.
    await this.until('the default service account exists', async () => this.exists('/api/v1/namespaces/default/serviceaccounts/default'));
  }

  /** Creates a namespace and waits for its default service account (made by the controller manager). */
  async namespace(name: string): Promise<void> {
    await this.client.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
    await this.until(`namespace ${name}'s default service account exists`, async () =>
      this.exists(`/api/v1/namespaces/${name}/serviceaccounts/default`),
    );
  }

  /**
   * Plays a storage administrator for `namespace` until the returned function is called: no
   * storage provisioner runs here, so each PersistentVolumeClaim waiting for a volume gets a
   * PersistentVolume made for it (a `hostPath` one, pre-bound by `claimRef`), and the real
   * PersistentVolume controller binds the two; a volume Released by a deleted claim is deleted.
   * Nothing is mounted (kwok runs no container): the objects and their binding are real, the
   * storage is not.
   */
  bindVolumes(namespace: string): () => Promise<void> {
    type Pvc = KubeObject & {
      spec: { volumeName?: string; accessModes: string[]; storageClassName?: string; resources: { requests: { storage: string } } };
    };
    type Pv = KubeObject & { spec: { claimRef?: { namespace: string } }; status?: { phase?: string } };
    const stop = new AbortController();
    const pass = async () => {
      const claims = await this.client.request<{ items: Pvc[] }>('GET', `/api/v1/namespaces/${namespace}/persistentvolumeclaims`);
      for (const pvc of claims.items) {
        if (pvc.spec.volumeName || pvc.metadata.deletionTimestamp) continue;
        const name = `pv-${pvc.metadata.uid!}`;
        if (await this.exists(`/api/v1/persistentvolumes/${name}`)) continue;
        await this.client.request('POST', '/api/v1/persistentvolumes', {
          apiVersion: 'v1',
          kind: 'PersistentVolume',
          metadata: { name, labels: { 'test.atelier.dev/bound-by': 'bindVolumes' } },
          spec: {
            capacity: { storage: pvc.spec.resources.requests.storage },
            accessModes: pvc.spec.accessModes,
            storageClassName: pvc.spec.storageClassName ?? '',
            persistentVolumeReclaimPolicy: 'Retain',
            hostPath: { path: `/nonexistent/atelier-test/${name}` },
            claimRef: { apiVersion: 'v1', kind: 'PersistentVolumeClaim', namespace, name: pvc.metadata.name, uid: pvc.metadata.uid },
          },
        });
      }
      const volumes = await this.client.request<{ items: Pv[] }>('GET', '/api/v1/persistentvolumes', undefined, {
        query: { labelSelector: 'test.atelier.dev/bound-by=bindVolumes' },
      });
      for (const pv of volumes.items) {
        if (pv.spec.claimRef?.namespace === namespace && pv.status?.phase === 'Released') {
          await this.client.request('DELETE', `/api/v1/persistentvolumes/${pv.metadata.name!}`);
        }
      }
    };
    const loop = (async () => {
      while (!stop.signal.aborted) {
        // A pass that fails (the API server restarting, an object deleted meanwhile) is retried.
        await pass().catch(() => undefined);
        await sleep(250, undefined, { signal: stop.signal }).catch(() => undefined);
      }
    })();
    return async () => {
      stop.abort();
      await loop;
    };
  }

  /** Stops one component (SIGTERM, then SIGKILL after 10 s); `restart` starts it again. */
  async stopComponent(name: string): Promise<void> {
    const c = this.components.get(name);
    if (!c) return;
    c.stopping = true;
    if (!c.child || c.child.exitCode !== null || c.child.signalCode !== null) return;
    c.child.kill('SIGTERM');
    const killer = setTimeout(() => c.child?.kill('SIGKILL'), 10_000);
    await c.exited;
    clearTimeout(killer);
  }

  async restart(name: string): Promise<void> {
    await this.stopComponent(name);
    await this.launch(name);
    if (name === 'kube-apiserver') await this.until('the API server is ready', () => this.apiReady());
  }

  /** Stops every component, last started first, and removes the control plane's files. */
  async stop(): Promise<void> {
    for (const name of [...this.components.keys()].reverse()) await this.stopComponent(name);
    this.client.close();
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** The API server's audit log: one JSON event per line, for pods/exec and pods/portforward only (Metadata level: the request URI). */
  get auditLog(): string {
    return join(this.dir, 'logs', 'audit.log');
  }

  /** The last lines of each component's log (for a failure's message). */
  logTails(lines = 15): string {
    const out: string[] = [];
    for (const name of this.components.keys()) {
      let text = '';
      try {
        text = readFileSync(join(this.dir, 'logs', `${name}.log`), 'utf8');
      } catch {
        continue;
      }
      out.push(`--- ${name}\n${text.trimEnd().split('\n').slice(-lines).join('\n')}`);
    }
    return out.join('\n');
  }

  /** Polls `check` (errors count as not yet) until it holds; throws naming `what` after `ms`. */
  async until(what: string, check: () => Promise<boolean>, ms = 120_000): Promise<void> {
    const deadline = Date.now() + ms;
    let last: unknown;
    for (;;) {
      try {
        if (await check()) return;
      } catch (err) {
        last = err;
      }
      for (const c of this.components.values()) {
        if (c.restarts > MAX_RESTARTS) {
          throw new Error(`waiting until ${what}: ${c.name} keeps exiting (${c.restarts} restarts)\n${this.logTails()}`);
        }
      }
      if (Date.now() > deadline) {
        throw new Error(`gave up waiting until ${what}${last ? `: ${(last as Error).message}` : ''}\n${this.logTails()}`);
      }
      await sleep(200);
    }
  }

  private async exists(path: string): Promise<boolean> {
    try {
      await this.client.request('GET', path);
      return true;
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return false;
      throw err;
    }
  }

  /** Whether /readyz answers 200 (its body is the text `ok`, which the JSON client cannot parse: that is the 2xx case). */
  private async apiReady(): Promise<boolean> {
    try {
      await this.client.request<unknown>('GET', '/readyz');
      return true;
    } catch (err) {
      if (err instanceof SyntaxError) return true;
      throw err;
    }
  }

  private define(name: string, argv: string[]): void {
    this.components.set(name, { name, argv, restarts: 0 });
  }

  private async launch(name: string): Promise<void> {
    const c = this.components.get(name)!;
    const log = openSync(join(this.dir, 'logs', `${name}.log`), 'a');
    // setpriv --pdeathsig: the component dies with this test process, even when the runner kills it.
    const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', ...c.argv], {
      cwd: this.dir,
      env: { ...process.env, KUBECONFIG: this.kubeconfig, ...c.env },
      stdio: ['ignore', log, log],
    });
    closeSync(log);
    c.child = child;
    c.stopping = false;
    c.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    // Like a kubelet with static pods: a component that exits by itself is started again (the
    // scheduler, for one, exits when it loses the API server during a restart).
    child.once('exit', (code, signal) => {
      if (c.stopping || c.child !== child) return;
      c.restarts++;
      appendFileSync(join(this.dir, 'logs', `${name}.log`), `--- exited (${code ?? signal}); started again\n`);
      if (c.restarts > MAX_RESTARTS) return;
      setTimeout(() => {
        if (!c.stopping) void this.launch(name).catch(() => undefined);
      }, 1000).unref();
    });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  }

  private async applyCrds(): Promise<void> {
    const names: string[] = [];
    for (const f of readdirSync(join(this.build, 'crds')).filter((n) => n.startsWith('agents.') || n.startsWith('extensions.agents.'))) {
      for (const doc of parseAllDocuments(readFileSync(join(this.build, 'crds', f), 'utf8'))) {
        const crd = doc.toJS() as KubeObject | null;
        if (!crd) continue;
        await this.client.request('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd);
        names.push(crd.metadata.name!);
      }
    }
    for (const name of names) {
      await this.until(`CRD ${name} is established`, async () => {
        const crd = await this.client.request<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
          'GET',
          `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`,
        );
        return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false;
      });
    }
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A CA, the API server's and kwok's serving certificates, the admin's client certificate, the service-account key pair. */
function makeCertificates(dir: string): void {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(dir, ['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=atelier-test-ca']);
  const leaf = (name: string, subject: string, ext: string) => {
    writeFileSync(join(dir, `${name}.ext`), ext);
    openssl(dir, ['req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject]);
    openssl(
      dir,
      ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial'].concat([
        '-out',
        `${name}.crt`,
        '-days',
        '2',
        '-extfile',
        `${name}.ext`,
      ]),
    );
  };
  const serving =
    'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n';
  leaf('apiserver', '/CN=kube-apiserver', serving);
  leaf('kwok', '/CN=kwok', serving);
  leaf('admin', '/O=system:masters/CN=atelier-test-admin', 'extendedKeyUsage=clientAuth\n');
  openssl(dir, ['genrsa', '-out', 'sa.key', '2048']);
  openssl(dir, ['rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub']);
}

function writeAuditPolicy(dir: string): string {
  const path = join(dir, 'audit-policy.yaml');
  writeFileSync(
    path,
    [
      'apiVersion: audit.k8s.io/v1',
      'kind: Policy',
      'omitStages: [RequestReceived]',
      'rules:',
      '- level: Metadata',
      '  resources: [{ group: "", resources: ["pods/exec", "pods/portforward"] }]',
      '- level: None',
      '',
    ].join('\n'),
  );
  return path;
}

function writeKubeconfig(dir: string, port: number): string {
  const path = join(dir, 'kubeconfig');
  writeFileSync(
    path,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      `- name: test`,
      `  cluster: { server: 'https://127.0.0.1:${port}', certificate-authority: '${join(dir, 'ca.crt')}' }`,
      'users:',
      `- name: admin`,
      `  user: { client-certificate: '${join(dir, 'admin.crt')}', client-key: '${join(dir, 'admin.key')}' }`,
      'contexts:',
      `- name: test`,
      `  context: { cluster: test, user: admin }`,
      'current-context: test',
      '',
    ].join('\n'),
  );
  return path;
}

/**
 * kwok's configuration: the stages (node initialize and heartbeat, pod create → ready → delete)
 * from the pinned module, a ClusterExec that serves `pods/exec` for every pod by running the
 * command on this host (in `exec/`), as kwok does: it tests the API path, not a container; and a
 * ClusterPortForward that serves `pods/portforward` for every pod by dialing 127.0.0.1 on
 * `ports.forward` (port 1 on `ports.unreachable`, where nothing listens).
 */
function writeKwokConfig(dir: string, build: string, ports: { forward: number; unreachable: number }): void {
  const stages = readdirSync(join(build, 'stages'))
    .sort()
    .map((f) => readFileSync(join(build, 'stages', f), 'utf8').trim());
  mkdirSync(join(dir, 'exec'));
  const exec = [
    'apiVersion: kwok.x-k8s.io/v1alpha1',
    'kind: ClusterExec',
    'metadata:',
    '  name: run-on-host',
    'spec:',
    '  execs:',
    '  - local:',
    `      workDir: ${join(dir, 'exec')}`,
  ].join('\n');
  const forward = [
    'apiVersion: kwok.x-k8s.io/v1alpha1',
    'kind: ClusterPortForward',
    'metadata:',
    '  name: dial-on-host',
    'spec:',
    '  forwards:',
    '  - ports: [1]',
    `    target: { address: 127.0.0.1, port: ${ports.unreachable} }`,
    `  - target: { address: 127.0.0.1, port: ${ports.forward} }`,
  ].join('\n');
  writeFileSync(join(dir, 'kwok.yaml'), [...stages, exec, forward].join('\n---\n') + '\n');
}

/** What a tool printed and how it exited. */
export interface ToolRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `bin` (helm, kubectl, a chart's command) with `env` only and `input` on its stdin; what it printed and its exit code. */
export function runTool(bin: string, args: string[], env: NodeJS.ProcessEnv, input?: string): Promise<ToolRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}
