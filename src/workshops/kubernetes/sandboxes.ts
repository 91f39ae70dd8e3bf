import { KubeApiError, type KubeClient, type KubeObject } from './client.js';
import { profileNetworkPolicy, profilePolicyName, workshopNetworkPolicy, type WorkshopNetwork } from './networkPolicy.js';
import { reshape, templateFits, workshopPodSpec, workspaceClaimTemplate, type WorkshopShape } from './pod.js';
import { podExec, type PodExecResult } from './podExec.js';

/**
 * Workshops as kubernetes-sigs/agent-sandbox objects (docs/kubernetes.md): a profile is a
 * `SandboxTemplate` and a `SandboxWarmPool` of the same name; a workshop is a `SandboxClaim` named
 * by the workshop's id on that pool (agent-sandbox adopts a warm `Sandbox` when the pool has one,
 * and cold-creates one from the template otherwise) when the template's pods have the workshop's
 * limits and disk size, and otherwise a `Sandbox` named by the id, made from the template with the
 * workshop's own (a claim cannot change a template's resources). Each workshop also gets its
 * NetworkPolicy, owned by that object. Stop and resume set the Sandbox's `operatingMode`; delete
 * removes the claim (or the Sandbox) and the garbage collector removes the rest: Sandbox, pod,
 * workspace volume claim, NetworkPolicy. Every status comes from the objects' conditions.
 * Nothing here creates pods.
 */

const CORE = 'agents.x-k8s.io/v1beta1';
const EXT = 'extensions.agents.x-k8s.io/v1beta1';
/** The label that names the workshop on the objects Atelier creates. */
export const WORKSHOP_LABEL = 'atelier.dev/workshop';
const PROFILE_LABEL = 'atelier.dev/profile';

export interface KubernetesProfile {
  /** A DNS label: the template's and the warm pool's name. */
  name: string;
  /** The workshop container's image. */
  image: string;
  /** `gvisor`, `kata-fc`…; the cluster's default runtime when unset. */
  runtimeClassName?: string;
  /** How many ready sandboxes the pool keeps for fast creates. */
  warmPool: number;
  /**
   * The limits and workspace size of the warm pool's pods: a workshop that asks for these is
   * claimed from the pool, one that asks for others is cold-created with its own.
   */
  defaults: WorkshopShape;
  /** The container's ephemeral-storage limit (its writable layer and logs; the workspace is a volume); `1Gi` when unset. */
  ephemeralStorage?: string;
  /** The workspace volumes' StorageClass; the cluster's default when unset. */
  storageClassName?: string;
  /** A read-only root filesystem for its pods (`/tmp` and the home writable); true when unset (pod.ts). */
  readOnlyRootFilesystem?: boolean;
}

export type KubeWorkshopState = 'Building' | 'Running' | 'Suspended' | 'Failed' | 'Deleting' | 'Gone';

/** A workshop's state as its objects' conditions tell it. */
export interface KubeWorkshopStatus {
  state: KubeWorkshopState;
  /** The deciding condition's reason (`DependenciesNotReady`, `SandboxSuspended`, `PodFailed`…). */
  reason: string;
  message: string;
  /** The Sandbox serving the claim (its pod has the same name), once bound. */
  sandbox?: string;
}

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}
type SandboxObject = KubeObject & {
  spec: { operatingMode?: string };
  status?: { conditions?: Condition[] };
};
type ClaimObject = KubeObject & { status?: { conditions?: Condition[]; sandbox?: { name?: string } } };
type Blueprint = Parameters<typeof reshape>[0] & { service?: boolean };
type TemplateObject = KubeObject & { spec: Blueprint };
/** Set by agent-sandbox on the pods of a claim's Sandbox, warm or cold: what the claim's NetworkPolicy selects. */
const CLAIM_UID_LABEL = 'agents.x-k8s.io/claim-uid';

/** What the watch did: lists (the first, and one per 410 Gone) and resumes from a resourceVersion. */
export interface WatchStats {
  lists: number;
  resumes: number;
}

const MAX_CONFLICT_RETRIES = 20;

/**
 * Reads the object at `path`, applies `mutate` and writes it back with its resourceVersion; on
 * 409 Conflict (someone wrote in between) reads it again and reapplies `mutate`, so neither
 * write is lost. `mutate` returns false when the object already is as wanted (no write).
 */
export async function updateWithRetry<T extends KubeObject>(
  client: KubeClient,
  path: string,
  mutate: (obj: T) => boolean | Promise<boolean>,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const obj = await client.request<T>('GET', path);
    if (!(await mutate(obj))) return obj;
    try {
      return await client.request<T>('PUT', path, obj);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 409) || attempt >= MAX_CONFLICT_RETRIES) throw err;
    }
  }
}

function condition(obj: { status?: { conditions?: Condition[] } }, type: string): Condition | undefined {
  return obj.status?.conditions?.find((c) => c.type === type);
}

/** A Sandbox's state from its spec and conditions (Ready is authoritative; Suspended may linger after a resume). */
export function sandboxState(sandbox: SandboxObject): Omit<KubeWorkshopStatus, 'sandbox'> {
  const ready = condition(sandbox, 'Ready');
  const finished = condition(sandbox, 'Finished');
  const why = { reason: ready?.reason ?? '', message: ready?.message ?? '' };
  if (sandbox.metadata.deletionTimestamp) return { state: 'Deleting', ...why };
  if (ready?.status === 'True') return { state: 'Running', ...why };
  if (finished?.status === 'True') return { state: 'Failed', reason: finished.reason ?? '', message: finished.message ?? '' };
  if (sandbox.spec.operatingMode === 'Suspended') {
    const suspended = condition(sandbox, 'Suspended');
    return { state: 'Suspended', reason: suspended?.reason ?? why.reason, message: suspended?.message ?? why.message };
  }
  return { state: 'Building', ...why };
}

export class KubernetesSandboxes {
  /** Counts of the last `watchStatuses` run. */
  readonly watchStats: WatchStats = { lists: 0, resumes: 0 };

  constructor(
    private readonly client: KubeClient,
    readonly namespace: string,
    private readonly network: WorkshopNetwork,
  ) {}

  private core(resource: string, name?: string): string {
    return `/apis/${CORE}/namespaces/${this.namespace}/${resource}${name ? `/${name}` : ''}`;
  }

  private ext(resource: string, name?: string): string {
    return `/apis/${EXT}/namespaces/${this.namespace}/${resource}${name ? `/${name}` : ''}`;
  }

  /** Creates or updates the profile's baseline NetworkPolicy (its pods: nothing in or out), SandboxTemplate and SandboxWarmPool. */
  async applyProfile(profile: KubernetesProfile): Promise<void> {
    const podSpec = workshopPodSpec({ ...profile, ephemeralStorage: profile.ephemeralStorage ?? '1Gi' }, profile.defaults.limits);
    const labels = { [PROFILE_LABEL]: profile.name };
    // Before the pool fills: its pods are closed from the start.
    await this.createOrUpdate(
      `/apis/networking.k8s.io/v1/namespaces/${this.namespace}/networkpolicies/${profilePolicyName(profile.name)}`,
      profileNetworkPolicy(profile.name, labels),
    );
    await this.createOrUpdate(this.ext('sandboxtemplates', profile.name), {
      apiVersion: EXT,
      kind: 'SandboxTemplate',
      metadata: { name: profile.name, labels },
      spec: {
        podTemplate: { metadata: { labels }, spec: podSpec },
        volumeClaimTemplates: [workspaceClaimTemplate(profile.defaults.diskBytes, profile.storageClassName)],
        networkPolicyManagement: 'Unmanaged',
      },
    });
    await this.createOrUpdate(this.ext('sandboxwarmpools', profile.name), {
      apiVersion: EXT,
      kind: 'SandboxWarmPool',
      metadata: { name: profile.name, labels },
      spec: { replicas: profile.warmPool, sandboxTemplateRef: { name: profile.name } },
    });
  }

  private async createOrUpdate(path: string, desired: KubeObject & { spec: unknown }): Promise<void> {
    try {
      await this.client.request('POST', path.slice(0, path.lastIndexOf('/')), desired);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 409)) throw err;
      await updateWithRetry<KubeObject & { spec: unknown }>(this.client, path, (obj) => {
        obj.spec = desired.spec;
        obj.metadata.labels = { ...obj.metadata.labels, ...desired.metadata.labels };
        return true;
      });
    }
  }

  /**
   * Creates workshop `id` of `profile` with `shape`, and its NetworkPolicy: a claim on the
   * profile's pool (a warm sandbox when the pool has one ready) when the template's pods have
   * `shape`, else a cold `Sandbox` from the template with the workshop's limits and disk size.
   * Returns the kind made. Without its policy the workshop is not left behind: it is deleted.
   */
  async create(id: string, profile: string, shape: WorkshopShape): Promise<'SandboxClaim' | 'Sandbox'> {
    const template = await this.client.request<TemplateObject>('GET', this.ext('sandboxtemplates', profile));
    const labels = { [WORKSHOP_LABEL]: id, [PROFILE_LABEL]: profile };
    let owner: KubeObject;
    let podLabels: Record<string, string>;
    if (templateFits(template.spec, shape)) {
      owner = await this.client.request('POST', this.ext('sandboxclaims'), {
        apiVersion: EXT,
        kind: 'SandboxClaim',
        metadata: { name: id, labels },
        spec: { warmPoolRef: { name: profile } },
      });
      podLabels = { [CLAIM_UID_LABEL]: owner.metadata.uid! };
    } else {
      const { podTemplate, volumeClaimTemplates, service } = reshape(template.spec, shape);
      owner = await this.client.request('POST', this.core('sandboxes'), {
        apiVersion: CORE,
        kind: 'Sandbox',
        metadata: { name: id, labels },
        spec: {
          // The workshop label down to the pod: what its NetworkPolicy selects.
          podTemplate: { ...podTemplate, metadata: { ...podTemplate.metadata, labels: { ...podTemplate.metadata?.labels, ...labels } } },
          volumeClaimTemplates,
          ...(service === undefined ? {} : { service }),
        },
      });
      podLabels = { [WORKSHOP_LABEL]: id };
    }
    const kind = owner.kind === 'Sandbox' ? 'Sandbox' : 'SandboxClaim';
    const ref = { apiVersion: owner.apiVersion!, kind, name: id, uid: owner.metadata.uid! };
    try {
      await this.client.request(
        'POST',
        `/apis/networking.k8s.io/v1/namespaces/${this.namespace}/networkpolicies`,
        workshopNetworkPolicy(id, podLabels, ref, this.network, labels),
      );
    } catch (err) {
      await this.delete(id).catch(() => undefined);
      throw err;
    }
    return kind;
  }

  /** The workshop's status from its claim and the claimed Sandbox. */
  async status(id: string): Promise<KubeWorkshopStatus> {
    let claim: ClaimObject;
    try {
      claim = await this.client.request<ClaimObject>('GET', this.ext('sandboxclaims', id));
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
      const direct = await this.directSandbox(id);
      if (!direct) return { state: 'Gone', reason: 'NotFound', message: `no SandboxClaim or Sandbox ${id}` };
      return { ...sandboxState(direct), sandbox: id };
    }
    const name = claim.status?.sandbox?.name;
    const ready = condition(claim, 'Ready');
    if (claim.metadata.deletionTimestamp) return { state: 'Deleting', reason: '', message: '', sandbox: name };
    if (!name) return { state: 'Building', reason: ready?.reason ?? 'Pending', message: ready?.message ?? '' };
    try {
      return { ...sandboxState(await this.client.request<SandboxObject>('GET', this.core('sandboxes', name))), sandbox: name };
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return { state: 'Building', reason: ready?.reason ?? 'Pending', message: '' };
      throw err;
    }
  }

  /** The Sandbox `id` the driver made itself for a workshop (a cold create with its own shape), if there is one. */
  private async directSandbox(id: string): Promise<SandboxObject | undefined> {
    try {
      const sb = await this.client.request<SandboxObject>('GET', this.core('sandboxes', id));
      return sb.metadata.labels?.[WORKSHOP_LABEL] === id ? sb : undefined;
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return undefined;
      throw err;
    }
  }

  /** The name of the Sandbox that serves workshop `id` (throws when its claim is not bound yet). */
  private async boundSandbox(id: string): Promise<string> {
    let claim: ClaimObject;
    try {
      claim = await this.client.request<ClaimObject>('GET', this.ext('sandboxclaims', id));
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404 && (await this.directSandbox(id))) return id;
      throw err;
    }
    const name = claim.status?.sandbox?.name;
    if (!name) throw new KubeApiError(409, 'NotBound', `workshop ${id} has no sandbox yet: wait until it is Running`);
    return name;
  }

  /** Stops the workshop: the Sandbox's pod is terminated, its volumes and the objects are kept. */
  async suspend(id: string): Promise<void> {
    await this.setMode(id, 'Suspended');
  }

  /** Starts a suspended workshop's pod again. */
  async resume(id: string): Promise<void> {
    await this.setMode(id, 'Running');
  }

  private async setMode(id: string, mode: 'Running' | 'Suspended'): Promise<void> {
    const name = await this.boundSandbox(id);
    await updateWithRetry<SandboxObject>(this.client, this.core('sandboxes', name), (sb) => {
      if (sb.spec.operatingMode === mode) return false;
      sb.spec.operatingMode = mode;
      return true;
    });
  }

  /** Runs `argv` in the workshop's container through `pods/exec` (the Sandbox's pod has the Sandbox's name). */
  async exec(id: string, argv: string[]): Promise<PodExecResult> {
    return podExec(this.client, this.namespace, await this.boundSandbox(id), 'workshop', argv);
  }

  /**
   * Deletes the claim (or the Sandbox the driver made); the garbage collector deletes the rest
   * through their owner references: the Sandbox, its pod, its workspace volume claim and the
   * workshop's NetworkPolicy.
   */
  async delete(id: string): Promise<void> {
    const options = { kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Background' };
    try {
      await this.client.request('DELETE', this.ext('sandboxclaims', id), options);
      return;
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
    if (!(await this.directSandbox(id))) return;
    try {
      await this.client.request('DELETE', this.core('sandboxes', id), options);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
  }

  /**
   * Reports every claimed Sandbox's status as it changes until `signal` aborts: one list, then a
   * watch that resumes from the last resourceVersion it saw when the stream ends (each watch asks
   * the server to end it after `timeoutSeconds`, 300 by default) or the API server goes away, and
   * relists only on 410 Gone (an API server that restarted has rebuilt its watch cache and answers
   * 410 for versions before it). `id` is the owning claim's name, or the label of a Sandbox the
   * driver made (the workshop's id).
   */
  async watchStatuses(
    onStatus: (id: string, status: KubeWorkshopStatus) => void,
    signal: AbortSignal,
    options: { timeoutSeconds?: number } = {},
  ): Promise<void> {
    const report = (sb: SandboxObject, deleted: boolean) => {
      const owner =
        sb.metadata.ownerReferences?.find((o) => o.kind === 'SandboxClaim' && o.controller)?.name ?? sb.metadata.labels?.[WORKSHOP_LABEL];
      if (!owner) return; // a warm pool's sandbox, not yet claimed
      const status: KubeWorkshopStatus = deleted
        ? { state: 'Gone', reason: 'Deleted', message: '', sandbox: sb.metadata.name }
        : { ...sandboxState(sb), sandbox: sb.metadata.name };
      onStatus(owner, status);
    };
    await this.client.listAndWatch<SandboxObject>(
      this.core('sandboxes'),
      { list: (items) => items.forEach((sb) => report(sb, false)), event: report },
      signal,
      { timeoutSeconds: options.timeoutSeconds, stats: this.watchStats },
    );
  }
}
