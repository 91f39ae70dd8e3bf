import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { KubeApiError, type KubeObject } from '../src/workshops/kubernetes/client.js';
import { ControlPlane, k8sToolsBuild, runTool, type ToolRun } from './helpers/k8s.js';
import { startNodes } from './helpers/nodes.js';
import { REPO_ROOT, type TestServer } from './helpers/server.js';

/**
 * The `Workshop` resource (deploy/helm/atelier/crds/) and its controller in the server, against
 * a real API server (etcd and kube-apiserver built from pinned modules: test/helpers/k8s.ts) and
 * two real Atelier servers on one PostgreSQL (two replicas of one installation): objects applied
 * with the real `kubectl`, workshops listed and made with the real CLI, the Lease held by one
 * replica and taken over by the other when the leader is killed. The servers talk to the API
 * server as the chart's ServiceAccount, bound to the chart's own Roles (rendered by the real
 * `helm`): the controller needs nothing the chart does not grant.
 */

const NS = 'atelier-workshops';
const CRD = join(REPO_ROOT, 'deploy', 'helm', 'atelier', 'crds', 'workshops.atelier.dev.yaml');
const BASE = `/apis/atelier.dev/v1alpha1/namespaces/${NS}/workshops`;
const LEASE = `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/atelier-workshop-controller`;
const OWNER = 'kube-controller';
const CHART = join(REPO_ROOT, 'deploy', 'helm', 'atelier');
/** The chart's values that turn the controller on (values.yaml, workshopResource). */
const CONTROLLER_VALUES = ['--set', 'workshopResource.enabled=true', '--set', `workshopResource.owner=${OWNER}`];
const AGENT_SANDBOX_APIS = [
  'agents.x-k8s.io/v1beta1/Sandbox',
  'extensions.agents.x-k8s.io/v1beta1/SandboxTemplate',
  'extensions.agents.x-k8s.io/v1beta1/SandboxClaim',
  'extensions.agents.x-k8s.io/v1beta1/SandboxWarmPool',
];

interface Ws {
  id: string;
  name: string;
  status: string;
  statusReason: string | null;
  ownerId: string | null;
  node: string;
}
type WorkshopObject = KubeObject & {
  spec: { devcontainer: { gitUrl: string }; simulators?: { name: string }[] };
  status?: {
    workshopId?: string;
    phase?: string;
    simulators?: { name: string; status: string }[];
    appliedSimulators?: string[];
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
};

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

describe('the Workshop resource: kubectl and the CLI in step, one leader of two replicas', { timeout: 1_200_000 }, () => {
  let cp: ControlPlane | undefined;
  let kubectlBin: string;
  let helmBin: string;
  let home: string;
  // Registered before the nodes' own hooks: their environment names the control plane.
  before(async () => {
    ({ kubectl: kubectlBin, helm: helmBin } = k8sToolsBuild());
    home = mkdtempSync('/tmp/atelier-kws-');
    cp = await ControlPlane.start({ apiOnly: true });
    await cp.client.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    const applied = await kubectl(['apply', '-f', CRD]);
    assert.equal(applied.code, 0, applied.stderr);
    await cp.until('the Workshop CRD is established', async () => {
      const crd = await cp!.client.request<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
        'GET',
        '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workshops.atelier.dev',
      );
      return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false;
    });
    // The servers act as the chart's ServiceAccount, with the chart's Roles: nothing more.
    const rbac = await render('templates/serviceaccount.yaml', 'templates/rbac.yaml');
    assert.equal(rbac.code, 0, rbac.stderr);
    const made = await kubectl(['apply', '-f', '-'], rbac.stdout);
    assert.equal(made.code, 0, made.stderr);
    const token = await kubectl(['create', 'token', 'atelier', '-n', NS, '--duration', '2h']);
    assert.equal(token.code, 0, token.stderr);
    const kubeconfig = join(home, 'atelier-sa.kubeconfig');
    writeFileSync(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        `clusters: [{ name: test, cluster: { server: '${cp.client.connection.server.href}', certificate-authority: '${join(cp.dir, 'ca.crt')}' } }]`,
        `users: [{ name: atelier, user: { token: '${token.stdout.trim()}' } }]`,
        'contexts: [{ name: atelier, context: { cluster: test, user: atelier } }]',
        'current-context: atelier',
        '',
      ].join('\n'),
    );
    // The controller's variables as the chart sets them on its Deployment; only the kubeconfig
    // differs (the servers are not pods here: the ServiceAccount's token above, not `in-cluster`).
    const deployment = await render('templates/deployment.yaml');
    assert.equal(deployment.code, 0, deployment.stderr);
    const rendered = parse(deployment.stdout) as {
      spec: { template: { spec: { containers: { env: { name: string; value?: string }[] }[] } } };
    };
    const chartEnv = Object.fromEntries(
      rendered.spec.template.spec.containers[0]!.env.filter((e) => e.name.startsWith('ATELIER_K8S_')).map((e) => [e.name, e.value]),
    );
    assert.deepEqual(chartEnv, {
      ATELIER_K8S_KUBECONFIG: 'in-cluster',
      ATELIER_K8S_WORKSHOPS_NAMESPACE: NS,
      ATELIER_K8S_WORKSHOPS_OWNER: OWNER,
      ATELIER_K8S_WORKSHOPS_TENANT: 'default',
      ATELIER_K8S_LEASE_NAMESPACE: NS,
    });
    Object.assign(nodes.env, {
      ...chartEnv,
      ATELIER_K8S_KUBECONFIG: kubeconfig,
      // Long enough for the leader to keep its lease across an API server restart, short enough
      // for the takeover below.
      ATELIER_K8S_LEASE_DURATION: '12s',
      ATELIER_K8S_RESYNC: '1s',
    });
  });
  const nodes = startNodes({ names: ['node-a', 'node-b'] });
  after(async () => {
    await cp?.stop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  let a: TestServer;
  let b: TestServer;
  let ownerId: string;

  /** kubectl as the cluster's admin (who applies the objects). */
  function kubectl(args: string[], input?: string): Promise<ToolRun> {
    return run(kubectlBin, args, input);
  }
  function run(bin: string, args: string[], input?: string): Promise<ToolRun> {
    return runTool(bin, args, { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, KUBECONFIG: cp!.kubeconfig }, input);
  }
  /** The chart's `templates` as helm renders them with the controller on (no cluster read). */
  function render(...templates: string[]): Promise<ToolRun> {
    return run(helmBin, [
      'template',
      'atelier',
      CHART,
      '--namespace',
      NS,
      ...templates.flatMap((t) => ['--show-only', t]),
      ...CONTROLLER_VALUES,
      ...AGENT_SANDBOX_APIS.flatMap((v) => ['--api-versions', v]),
    ]);
  }
  const apply = async (name: string, simulators: { name: string }[] = []): Promise<void> => {
    const manifest = JSON.stringify({
      apiVersion: 'atelier.dev/v1alpha1',
      kind: 'Workshop',
      metadata: { name, namespace: NS },
      spec: { devcontainer: { gitUrl: nodes.repo }, simulators },
    });
    const r = await kubectl(['apply', '-f', '-'], manifest);
    assert.equal(r.code, 0, r.stderr);
  };
  const object = (name: string) => cp!.client.request<WorkshopObject>('GET', `${BASE}/${name}`);
  const gone = async (name: string): Promise<boolean> => {
    try {
      await object(name);
      return false;
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return true;
      throw err;
    }
  };
  /** `atelier workshops list` through `server`, with the real CLI. */
  const list = async (server: TestServer): Promise<Ws[]> => {
    const r = await server.cli(['workshops', 'list', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const parsed = JSON.parse(r.stdout) as Ws[] | { items: Ws[] };
    return Array.isArray(parsed) ? parsed : parsed.items;
  };
  const running = (server: TestServer, name: string) =>
    until(`workshop ${name} Running in \`atelier workshops list\``, async () => {
      const w = (await list(server)).find((x) => x.name === name);
      if (w?.status === 'Failed') throw new Error(`${name} failed: ${w.statusReason}`);
      return w?.status === 'Running' ? w : undefined;
    });
  /** The replica holding the lease (`via`: a live replica to ask for the nodes' ids). */
  const leader = async (via: TestServer = a): Promise<TestServer> => {
    const lease = await cp!.client.request<KubeObject & { spec: { holderIdentity?: string } }>('GET', LEASE);
    const r = await via.api<{ items: { id: string; name: string }[] }>('GET', '/v1/nodes');
    const name = r.body.items.find((n) => n.id === lease.spec.holderIdentity)?.name;
    assert.ok(name, `the lease's holder ${lease.spec.holderIdentity} is a node`);
    return name === 'node-a' ? a : b;
  };

  before(async () => {
    [a, b] = nodes.servers as [TestServer, TestServer];
    const added = await a.cli(['users', 'add', OWNER, '--role', 'maintainer']);
    assert.equal(added.code, 0, added.stderr);
    const users = await a.api<{ items: { id: string; name: string }[] }>('GET', '/v1/users');
    ownerId = users.body.items.find((u) => u.name === OWNER)!.id;
  });

  it('the CRD schema refuses a bad object: 422 naming the field', async () => {
    const post = (body: object) =>
      cp!.client.request('POST', BASE, { apiVersion: 'atelier.dev/v1alpha1', kind: 'Workshop', ...body }).then(
        () => assert.fail('accepted'),
        (err: unknown) => err as KubeApiError,
      );
    const noUrl = await post({ metadata: { name: 'no-url' }, spec: { devcontainer: {} } });
    assert.equal(noUrl.status, 422);
    assert.match(noUrl.message, /spec\.devcontainer\.gitUrl: Required value/);
    const badType = await post({
      metadata: { name: 'bad-type' },
      spec: { devcontainer: { gitUrl: nodes.repo }, simulators: [{ name: 'db', type: 'mysql' }] },
    });
    assert.equal(badType.status, 422);
    assert.match(badType.message, /spec\.simulators\[0\]\.type: Unsupported value: "mysql"/);
    const dotted = await post({ metadata: { name: 'feature.auth' }, spec: { devcontainer: { gitUrl: nodes.repo } } });
    assert.equal(dotted.status, 422);
    assert.match(dotted.message, /metadata\.name is the workshop's name/);
  });

  it('one of the two replicas holds the Lease', async () => {
    await until('a holder of the lease', async () => (await leader()) ?? undefined);
  });

  it('kubectl apply: the workshop appears in `atelier workshops list`, owned by the configured user; its id and state in the object', async () => {
    await apply('from-kubectl');
    const w = await running(b, 'from-kubectl');
    assert.equal(w.ownerId, ownerId, 'owned by ATELIER_K8S_WORKSHOPS_OWNER, whoever applied the object');
    const obj = await until('the object shows the workshop Running', async () => {
      const o = await object('from-kubectl');
      return o.status?.phase === 'Running' ? o : undefined;
    });
    assert.equal(obj.status!.workshopId, w.id);
    assert.equal(obj.metadata.labels?.['atelier.dev/workshop-id'], w.id);
    assert.deepEqual(obj.metadata.finalizers, ['atelier.dev/workshop']);
    const ready = obj.status!.conditions!.find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'True');
    assert.equal(ready?.reason, 'Running');
    // The printer columns.
    const got = await kubectl(['get', 'workshops', '-n', NS, 'from-kubectl']);
    assert.equal(got.code, 0, got.stderr);
    assert.match(got.stdout, /NAME\s+WORKSHOP\s+PHASE\s+REPOSITORY\s+AGE/);
    assert.match(got.stdout, new RegExp(`from-kubectl\\s+${w.id}\\s+Running\\s+${nodes.repo}`));
  });

  it('an object the server refuses: phase Refused and why in its Ready condition, no workshop; deleted, it goes', async () => {
    const r = await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'atelier.dev/v1alpha1',
        kind: 'Workshop',
        metadata: { name: 'outside', namespace: NS },
        spec: { devcontainer: { gitUrl: '/srv/not-allowed/repo' } },
      }),
    );
    assert.equal(r.code, 0, r.stderr);
    const obj = await until('the refusal in the object', async () => {
      const o = await object('outside');
      return o.status?.phase === 'Refused' ? o : undefined;
    });
    const ready = obj.status!.conditions!.find((c) => c.type === 'Ready')!;
    assert.equal(ready.status, 'False');
    assert.equal(ready.reason, 'CreateRefused');
    assert.match(ready.message!, /\/srv\/not-allowed\/repo/);
    assert.equal(
      (await list(a)).find((w) => w.name === 'outside'),
      undefined,
    );
    const del = await kubectl(['delete', 'workshop', 'outside', '-n', NS, '--wait=true']);
    assert.equal(del.code, 0, del.stderr);
    assert.equal(await gone('outside'), true);
  });

  it('`atelier workshops create`: a Workshop object appears, labelled as Atelier-made, and only one', async () => {
    const made = await a.cli(['workshops', 'create', '--repo', nodes.repo, '--name', 'from-cli']);
    assert.equal(made.code, 0, made.stderr);
    const w = await running(a, 'from-cli');
    const obj = await until('the object of from-cli', async () => {
      const o = await object(w.id).catch(() => undefined);
      return o?.status?.phase === 'Running' ? o : undefined;
    });
    assert.equal(obj.metadata.labels?.['app.kubernetes.io/managed-by'], 'atelier');
    assert.equal(obj.metadata.annotations?.['atelier.dev/name'], 'from-cli');
    assert.equal(obj.spec.devcontainer.gitUrl, nodes.repo);
    // A few passes later: still one object, still one workshop of that name.
    await new Promise((r) => setTimeout(r, 3000));
    const all = await cp!.client.request<{ items: WorkshopObject[] }>('GET', BASE);
    assert.equal(all.items.filter((o) => o.status?.workshopId === w.id).length, 1);
    assert.equal((await list(b)).filter((x) => x.name === 'from-cli').length, 1);
  });

  it('deleting either deletes both: kubectl delete removes the workshop, `atelier workshops delete` the object', async () => {
    const fromKubectl = (await list(a)).find((x) => x.name === 'from-kubectl')!;
    const fromCli = (await list(a)).find((x) => x.name === 'from-cli')!;
    // The CLI's workshop through kubectl (it may run on the other replica: the delete is asked of its node)…
    const del = await kubectl(['delete', 'workshop', fromCli.id, '-n', NS, '--wait=true']);
    assert.equal(del.code, 0, del.stderr);
    // --wait returns once the finalizer is gone: the controller removed it after deleting the workshop.
    assert.equal(await gone(fromCli.id), true);
    assert.equal(
      (await list(b)).find((x) => x.id === fromCli.id),
      undefined,
      'the workshop is gone',
    );
    // …and kubectl's workshop through the CLI.
    const cliDel = await a.cli(['workshops', 'delete', fromKubectl.id]);
    assert.equal(cliDel.code, 0, cliDel.stderr);
    await until('the object of the deleted workshop is gone', async () => ((await gone('from-kubectl')) ? true : undefined));
  });

  it('a simulator added to spec.simulators of a running workshop starts live; removed, it stops', async () => {
    await apply('with-sims');
    const w = await running(a, 'with-sims');
    await apply('with-sims', [{ name: 'redis' }]);
    const obj = await until('redis Running in the object status', async () => {
      const o = await object('with-sims');
      return o.status?.simulators?.find((s) => s.name === 'redis')?.status === 'Running' ? o : undefined;
    });
    assert.deepEqual(obj.status!.appliedSimulators, ['redis']);
    const sims = await a.cli(['simulators', 'list', w.id, '-o', 'json']);
    assert.equal(sims.code, 0, sims.stderr);
    const listed = JSON.parse(sims.stdout) as { name: string; status: string }[] | { items: { name: string; status: string }[] };
    const items = Array.isArray(listed) ? listed : listed.items;
    assert.equal(items.find((s) => s.name === 'redis')?.status, 'Running');
    await apply('with-sims', []);
    await until('redis stopped', async () => {
      const o = await object('with-sims');
      const redis = o.status?.simulators?.find((s) => s.name === 'redis');
      return redis && redis.status !== 'Running' && o.status?.appliedSimulators?.length === 0 ? true : undefined;
    });
  });

  it('a workshop the leader does not run: its simulator is started on its own node, through that node', async () => {
    const lead = await leader();
    const elsewhere = lead === a ? 'node-b' : 'node-a';
    const made = await a.cli(['workshops', 'create', '--repo', nodes.repo, '--name', 'elsewhere', '--node', elsewhere]);
    assert.equal(made.code, 0, made.stderr);
    const w = await running(a, 'elsewhere');
    assert.equal(w.node, elsewhere);
    await until('its object Running', async () =>
      (await object(w.id).catch(() => undefined))?.status?.phase === 'Running' ? true : undefined,
    );
    const patched = await kubectl([
      'patch',
      'workshop',
      w.id,
      '-n',
      NS,
      '--type=merge',
      '-p',
      JSON.stringify({ spec: { simulators: [{ name: 'redis' }] } }),
    ]);
    assert.equal(patched.code, 0, patched.stderr);
    await until('redis Running in its object', async () =>
      (await object(w.id)).status?.simulators?.find((s) => s.name === 'redis')?.status === 'Running' ? true : undefined,
    );
    const sims = await b.cli(['simulators', 'list', w.id, '-o', 'json']);
    assert.equal(sims.code, 0, sims.stderr);
    const listed = JSON.parse(sims.stdout) as { name: string; status: string }[] | { items: { name: string; status: string }[] };
    assert.equal((Array.isArray(listed) ? listed : listed.items).find((s) => s.name === 'redis')?.status, 'Running');
  });

  it('the watch goes on across an API server restart: an object applied after it is reconciled', async () => {
    await cp!.restart('kube-apiserver');
    await apply('after-restart');
    await running(b, 'after-restart');
  });

  it('a leader stopped cleanly releases its lease: the other takes it without waiting for it to expire', async () => {
    const first = await leader();
    const other = first === a ? b : a;
    const nodesNow = await other.api<{ items: { id: string; name: string }[] }>('GET', '/v1/nodes');
    const otherId = nodesNow.body.items.find((n) => n.name === (other === a ? 'node-a' : 'node-b'))!.id;
    await first.stop();
    // Read at once: released (no holder), or already the other's; never still the stopped one's.
    const lease = await cp!.client.request<KubeObject & { spec: { holderIdentity?: string | null } }>('GET', LEASE);
    assert.ok(
      [null, undefined, '', otherId].includes(lease.spec.holderIdentity),
      `holder after a clean stop: ${lease.spec.holderIdentity}`,
    );
    await until('the other replica holds the lease', async () => ((await leader(other)) === other ? true : undefined));
    await first.boot();
  });

  it('two replicas, one leader: the leader killed, the other takes the lease and reconciles an object applied meanwhile', async () => {
    const first = await leader();
    const other = first === a ? b : a;
    await first.stop('SIGKILL');
    await apply('during-takeover');
    await until('the other replica holds the lease', async () => ((await leader(other)) === other ? true : undefined), 120_000);
    const w = await running(other, 'during-takeover');
    assert.equal(w.node, other === a ? 'node-a' : 'node-b', 'created by the new leader');
    const obj = await until('its object shows it', async () => {
      const o = await object('during-takeover');
      return o.status?.workshopId === w.id ? o : undefined;
    });
    assert.equal(obj.status!.phase, 'Running');
  });
});
