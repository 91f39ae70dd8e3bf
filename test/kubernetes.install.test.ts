import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { KubeObject } from '../src/workshops/kubernetes/client.js';
import { ControlPlane, k8sToolsBuild, runTool } from './helpers/k8s.js';
import { runCli, type CliResult } from './helpers/server.js';

/**
 * `atelier server install --kubernetes` as a user runs it (bin/atelier, with the pinned `helm` of
 * scripts/k8s-tools.sh on PATH) against a real API server (test/helpers/k8s.ts, API server only:
 * etcd, kube-apiserver and the agent-sandbox CRDs; no controller runs, so the Deployment's pods
 * are not made here): the plan, a real install, a re-run that changes nothing, an upgrade, and
 * the refusals (no helm, no kubeconfig, unknown context, unreachable API server, no agent-sandbox
 * CRD).
 */

const NS = 'atelier';
const VALUES = `
replicaCount: 1
image: { repository: registry.example/atelier, tag: "1.2.3" }
profiles:
  - name: default
    image: registry.example/workshop:1
    warmPool: 0
`;

type Obj = KubeObject & { kind: string };

/** What a stack trace looks like in Node's output: the command must never print one. */
const STACK = /\n\s+at .+\(?.*:\d+:\d+\)?/;

describe('atelier server install --kubernetes on a real API server (helm built from pinned modules)', { timeout: 900_000 }, () => {
  let cp: ControlPlane | undefined;
  let tools: { helm: string; kubectl: string };
  let home: string;
  let valuesFile: string;

  before(async () => {
    tools = k8sToolsBuild();
    home = mkdtempSync('/tmp/atelier-k8sinstall-');
    valuesFile = join(home, 'values.yaml');
    writeFileSync(valuesFile, VALUES);
    cp = await ControlPlane.start({ apiOnly: true });
    await cp.client.request('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  });
  after(async () => {
    await cp?.stop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  /** The environment a user has: helm on PATH, a kubeconfig in KUBECONFIG, a home of their own. */
  const userEnv = (extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv => ({
    PATH: `${dirname(tools.helm)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    HOME: home,
    XDG_CONFIG_HOME: join(home, '.config'),
    XDG_DATA_HOME: join(home, '.local/share'),
    XDG_CACHE_HOME: join(home, '.cache'),
    KUBECONFIG: cp!.kubeconfig,
    ...extra,
  });
  const atelier = (args: string[], extra?: Record<string, string | undefined>): Promise<CliResult> =>
    runCli(['server', 'install', '--kubernetes', ...args], { env: userEnv(extra) });
  const ok = (r: CliResult, what: string): string => {
    assert.equal(r.code, 0, `${what} failed (exit ${r.code}):\n${r.stderr}\n${r.stdout}`);
    return r.stdout;
  };
  /** A refusal: exit 1, the message on stderr, no stack trace. */
  const refused = (r: CliResult, pattern: RegExp): void => {
    assert.equal(r.code, 1, `expected a refusal, got exit ${r.code}:\n${r.stderr}\n${r.stdout}`);
    assert.match(r.stderr, pattern);
    assert.doesNotMatch(r.stderr, STACK);
  };
  const tool = (bin: string, args: string[], input?: string): Promise<CliResult> => runTool(bin, args, userEnv(), input);
  const kubectl = (args: string[], input?: string) => tool(tools.kubectl, args, input);
  const helm = (...args: string[]) => tool(tools.helm, args);
  const objects = (yaml: string): Obj[] =>
    parseAllDocuments(yaml)
      .map((d) => {
        assert.deepEqual(d.errors, [], 'each document is YAML');
        return d.toJS() as Obj | null;
      })
      .filter((o): o is Obj => o !== null);
  const made = async (): Promise<string> =>
    ok(
      await kubectl(['get', 'deployments,services,serviceaccounts,roles,rolebindings,configmaps,sandboxtemplates', '-n', NS, '-o', 'name']),
      'kubectl get',
    ).trim();

  it('refuses bad input before it reaches a cluster: no helm, no kubeconfig, an unknown context, host-only flags', async () => {
    refused(await atelier([], { PATH: '/usr/bin:/bin' }), /`helm` is not on PATH: .*install it \(https:\/\/helm\.sh/);
    refused(
      await atelier([], { KUBECONFIG: undefined }),
      /no kubeconfig: .*\.kube\/config does not exist and neither KUBECONFIG nor --kubeconfig is set/,
    );
    refused(await atelier(['--kubeconfig', join(home, 'nope')]), /--kubeconfig .*nope: no such file/);
    refused(await atelier(['--kube-context', 'prod']), /has no context "prod" \(it has: test\): give one of them with --kube-context/);
    refused(
      await atelier(['--listen', '0.0.0.0:80']),
      /--listen configure a service on this machine, not the Helm chart: with --kubernetes give chart values/,
    );
    refused(await atelier(['--values', join(home, 'missing.yaml')]), /--values .*missing\.yaml: no such file/);
    // And the Kubernetes flags without --kubernetes.
    refused(await runCli(['server', 'install', '--namespace', 'x'], { env: userEnv() }), /--namespace goes with --kubernetes/);
  });

  it('refuses an API server that does not answer, naming the context to check', async () => {
    // The same kubeconfig, pointed at a port where nothing listens.
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const dead = join(home, 'dead.kubeconfig');
    writeFileSync(dead, readFileSync(cp!.kubeconfig, 'utf8').replace(/127\.0\.0\.1:\d+/, `127.0.0.1:${port}`));
    refused(await atelier(['--kubeconfig', dead, '--plan']), /the Kubernetes API server does not answer .*check that the cluster is up/);
    refused(await atelier(['--kubeconfig', dead]), /the Kubernetes API server does not answer/);
  });

  it('--plan prints the rendered manifests, which the API server accepts (server-side dry run), and changes nothing', async () => {
    const r = await atelier(['--plan', '--values', valuesFile]);
    const yaml = ok(r, 'install --plan');
    assert.match(r.stderr, /plan only: would install release atelier in namespace atelier \(\d+ objects above\); nothing was changed/);
    const list = objects(yaml);
    const kinds = list.map((o) => o.kind).sort();
    for (const kind of ['Deployment', 'Service', 'ServiceAccount', 'Role', 'RoleBinding', 'SandboxTemplate', 'SandboxWarmPool'])
      assert.ok(kinds.includes(kind), `${kind} among ${kinds.join(', ')}`);
    const deployment = list.find((o) => o.kind === 'Deployment') as Obj & { spec: { replicas: number } };
    assert.equal(deployment.spec.replicas, 1, 'the values file is applied to the plan');
    const applied = ok(await kubectl(['apply', '--dry-run=server', '-n', NS, '-f', '-'], yaml), 'kubectl apply --dry-run=server');
    assert.equal(applied.split('\n').filter((l) => l.endsWith('(server dry run)')).length, list.length, applied);

    const asJson = await runCli(['server', 'install', '--kubernetes', '--plan', '--values', valuesFile, '-o', 'json'], { env: userEnv() });
    const plan = JSON.parse(ok(asJson, 'install --plan -o json').trim()) as {
      plan: boolean;
      action: string;
      objects: { kind: string; name: string }[];
      manifest: string;
    };
    assert.equal(plan.plan, true);
    assert.equal(plan.action, 'install');
    assert.equal(plan.objects.length, list.length);
    assert.equal(objects(plan.manifest).length, list.length);

    assert.equal(await made(), '', 'nothing made');
    assert.match((await helm('status', 'atelier', '-n', NS)).stderr, /release: not found/);
  });

  it('installs: the Deployment, Service and RBAC are made; a second run changes nothing; a new value upgrades', async () => {
    const first = JSON.parse(ok(await atelier(['--values', valuesFile, '-o', 'json']), 'install').trim()) as {
      action: string;
      changed: number;
      revision: number;
    };
    assert.deepEqual([first.action, first.changed, first.revision], ['installed', 1, 1]);
    const names = (await made()).split('\n');
    for (const name of [
      'deployment.apps/atelier',
      'service/atelier',
      'serviceaccount/atelier',
      'role.rbac.authorization.k8s.io/atelier-workshops',
      'rolebinding.rbac.authorization.k8s.io/atelier-workshops',
      'sandboxtemplate.extensions.agents.x-k8s.io/default',
    ])
      assert.ok(names.includes(name), `${name} among ${names.join(', ')}`);
    const sa = `system:serviceaccount:${NS}:atelier`;
    assert.equal((await kubectl(['auth', 'can-i', '--as', sa, 'create', 'sandboxclaims.extensions.agents.x-k8s.io', '-n', NS])).code, 0);

    const again = await atelier(['--values', valuesFile]);
    ok(again, 'second install');
    assert.match(again.stderr, /no change: release atelier in namespace atelier \(revision 1\) is already as rendered/);
    assert.match(ok(await helm('history', 'atelier', '-n', NS, '-o', 'json'), 'helm history'), /^\[\{"revision":1,[^\]]*\}\]\s*$/);

    const planned = await atelier(['--plan', '--values', valuesFile, '--set', 'replicaCount=3']);
    ok(planned, 'plan of an upgrade');
    assert.match(planned.stderr, /would upgrade release atelier in namespace atelier \(now revision 1\)/);
    const upgraded = await atelier(['--values', valuesFile, '--set', 'replicaCount=3']);
    ok(upgraded, 'upgrade');
    assert.match(upgraded.stderr, /upgraded: release atelier in namespace atelier, revision 2/);
    const replicas = await kubectl(['get', 'deployment/atelier', '-n', NS, '-o', 'jsonpath={.spec.replicas}']);
    assert.equal(ok(replicas, 'kubectl get'), '3');

    ok(await helm('uninstall', 'atelier', '-n', NS), 'helm uninstall');
  });

  it("refuses bad values with the chart's own message, and a namespace that does not exist", async () => {
    refused(await atelier(['--set', 'database.existingSecret=']), /the chart refused to render: database\.existingSecret is required/);
    refused(await atelier(['--set', 'replicaCount=-1']), /the values do not fit the chart's schema/);
    refused(await atelier(['--namespace', 'nowhere']), /namespace nowhere does not exist: create it and the chart's Secrets first/);
  });

  it('refuses a cluster without the agent-sandbox CRDs, naming the missing one; nothing is installed', async () => {
    ok(await kubectl(['delete', 'crd', 'sandboxwarmpools.extensions.agents.x-k8s.io', '--wait=true']), 'kubectl delete crd');
    await cp!.until('discovery no longer lists SandboxWarmPool', async () => {
      const group = await cp!.client.request<{ resources: { kind: string }[] }>('GET', '/apis/extensions.agents.x-k8s.io/v1beta1');
      return !group.resources.some((r) => r.kind === 'SandboxWarmPool');
    });
    rmSync(join(home, '.kube', 'cache'), { recursive: true, force: true });
    mkdirSync(join(home, '.kube'), { recursive: true });
    const missing =
      /the chart refused to render: the cluster does not serve extensions\.agents\.x-k8s\.io\/v1beta1\/SandboxWarmPool: install the agent-sandbox controller and its CRDs first/;
    refused(await atelier(['--plan']), missing);
    refused(await atelier([]), missing);
    assert.match((await helm('status', 'atelier', '-n', NS)).stderr, /release: not found/, 'no release left behind');
  });
});
