import type { WorkshopLimits } from '../../core/index.js';

/**
 * The workshop pod's shape as agent-sandbox objects carry it (docs/kubernetes.md, "The pod"):
 * the `workshop` container with the workshop's limits, and the `workspace` volume claim template,
 * which agent-sandbox turns into a PersistentVolumeClaim owned by the Sandbox, so the files outlive
 * the pod (suspend deletes the pod; resume makes a new one on the same claim).
 */

/** Where the workspace volume is mounted in the workshop container (as on the local driver). */
export const WORKSPACE_PATH = '/workspace';
/** The volume claim template's name: agent-sandbox names the claim `workspace-<sandbox>`. */
export const WORKSPACE_VOLUME = 'workspace';
const CONTAINER = 'workshop';
/**
 * The workshop user's home where the root filesystem is read-only: a writable volume of the pod's
 * own (`HOME` names it), as `/tmp` is; both go with the pod (a suspend empties them), the
 * workspace stays.
 */
export const HOME_PATH = '/home/atelier';
/** The container's user; `fsGroup` makes the workspace volume writable by it. */
const USER = 1000;

/** What one workshop asks for: its limits and its workspace volume's size. */
export interface WorkshopShape {
  limits: WorkshopLimits;
  diskBytes: number;
}

/** A CPU count as a Kubernetes quantity (`2`, `1500m`). */
export function cpuQuantity(cpus: number): string {
  const milli = Math.round(cpus * 1000);
  return milli % 1000 === 0 ? String(milli / 1000) : `${milli}m`;
}

/** A byte count as the quantity the API server would print for it (`2Gi`, `512Mi`, `1000000`). */
export function bytesQuantity(bytes: number): string {
  for (const [suffix, unit] of [
    ['Ti', 2 ** 40],
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20],
    ['Ki', 2 ** 10],
  ] as const) {
    if (bytes >= unit && bytes % unit === 0) return `${bytes / unit}${suffix}`;
  }
  return String(bytes);
}

/**
 * The container's resource limits. Requests are left out on purpose: the API server sets them
 * equal to the limits (Guaranteed QoS, nothing overcommitted on the node). A pids limit has no
 * field in the pod spec (it is the kubelet's `podPidsLimit`, per node), so `limits.pids` is not
 * carried here.
 */
export function workshopResources(limits: WorkshopLimits, ephemeralStorage: string): { limits: Record<string, string> } {
  return {
    limits: { ...ownLimits(limits), 'ephemeral-storage': ephemeralStorage },
  };
}

/** The workspace volume claim template of `diskBytes` (`storageClassName`: the cluster's default when unset). */
export function workspaceClaimTemplate(diskBytes: number, storageClassName?: string): Record<string, unknown> {
  const spec: Record<string, unknown> = {
    accessModes: ['ReadWriteOnce'],
    resources: { requests: { storage: bytesQuantity(diskBytes) } },
  };
  if (storageClassName) spec.storageClassName = storageClassName;
  return { metadata: { name: WORKSPACE_VOLUME }, spec };
}

export interface PodSpecOptions {
  image: string;
  runtimeClassName?: string;
  ephemeralStorage: string;
  /** False for an image that must write outside /workspace, /tmp and the home (a package manager at run time); true by default. */
  readOnlyRootFilesystem?: boolean;
}

/**
 * The workshop pod's spec: no service-account token, non-root, no privilege escalation, no
 * capabilities, a read-only root filesystem unless the profile says otherwise (then `/tmp` and the
 * home, HOME_PATH, are writable volumes of the pod, counted in its ephemeral-storage limit), the
 * workspace volume mounted at /workspace and the commands started there (agent-sandbox adds the
 * volume itself, named after the claim template), and the workshop's limits.
 */
export function workshopPodSpec(options: PodSpecOptions, limits: WorkshopLimits): Record<string, unknown> {
  const readOnly = options.readOnlyRootFilesystem ?? true;
  const container: Record<string, unknown> = {
    name: CONTAINER,
    image: options.image,
    command: ['sleep', 'infinity'],
    workingDir: WORKSPACE_PATH,
    securityContext: {
      runAsNonRoot: true,
      runAsUser: USER,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      readOnlyRootFilesystem: readOnly,
    },
    resources: workshopResources(limits, options.ephemeralStorage),
    volumeMounts: [
      { name: WORKSPACE_VOLUME, mountPath: WORKSPACE_PATH },
      ...(readOnly
        ? [
            { name: 'tmp', mountPath: '/tmp' },
            { name: 'home', mountPath: HOME_PATH },
          ]
        : []),
    ],
  };
  if (readOnly) container.env = [{ name: 'HOME', value: HOME_PATH }];
  const spec: Record<string, unknown> = {
    automountServiceAccountToken: false,
    securityContext: { fsGroup: USER },
    containers: [container],
  };
  if (readOnly)
    spec.volumes = [
      { name: 'tmp', emptyDir: {} },
      { name: 'home', emptyDir: {} },
    ];
  if (options.runtimeClassName) spec.runtimeClassName = options.runtimeClassName;
  return spec;
}

type Blueprint = {
  podTemplate: {
    metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
    spec: { containers?: { name: string; resources?: { limits?: Record<string, string> } }[] };
  };
  volumeClaimTemplates?: { metadata?: { name?: string }; spec?: { resources?: { requests?: Record<string, string> } } }[];
};

/** The limits that differ from one workshop to the next (the ephemeral-storage limit is the profile's). */
function ownLimits(limits: WorkshopLimits): Record<string, string> {
  return { cpu: cpuQuantity(limits.cpus), memory: bytesQuantity(limits.memoryBytes) };
}

/**
 * True when a template's pods already have `shape` (same CPU and memory limits, same workspace
 * size), so a warm sandbox of its pool fits the workshop. Compared as the strings this file
 * writes: a template written otherwise only costs a cold create, never wrong limits.
 */
export function templateFits(blueprint: Blueprint, shape: WorkshopShape): boolean {
  const have = blueprint.podTemplate.spec.containers?.find((c) => c.name === CONTAINER)?.resources?.limits ?? {};
  const disk = blueprint.volumeClaimTemplates?.find((v) => v.metadata?.name === WORKSPACE_VOLUME)?.spec?.resources?.requests?.storage;
  return Object.entries(ownLimits(shape.limits)).every(([k, v]) => have[k] === v) && disk === bytesQuantity(shape.diskBytes);
}

/** A copy of `blueprint` with `shape`'s CPU and memory limits on the workshop container and its workspace size. */
export function reshape<T extends Blueprint>(blueprint: T, shape: WorkshopShape): T {
  const copy = structuredClone(blueprint);
  const container = copy.podTemplate.spec.containers?.find((c) => c.name === CONTAINER);
  if (!container) throw new Error(`the template has no container named ${CONTAINER}`);
  container.resources = { ...container.resources, limits: { ...container.resources?.limits, ...ownLimits(shape.limits) } };
  const volume = copy.volumeClaimTemplates?.find((v) => v.metadata?.name === WORKSPACE_VOLUME);
  if (!volume?.spec) throw new Error(`the template has no ${WORKSPACE_VOLUME} volume claim template`);
  volume.spec.resources = {
    ...volume.spec.resources,
    requests: { ...volume.spec.resources?.requests, storage: bytesQuantity(shape.diskBytes) },
  };
  return copy;
}
