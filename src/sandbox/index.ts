export {
  cgroupBase,
  cgroupSupport,
  childCgroups,
  createCgroups,
  destroyCgroups,
  freeze,
  isFrozen,
  procsFiles,
  thaw,
  workshopCgroups,
} from './cgroups.js';
export type { CgroupPaths } from './cgroups.js';
export { diskUsage, freeBytes, isMountPoint, WorkshopDisks } from './disk.js';
export type { DiskUsage, Runner, WorkshopDisksOptions } from './disk.js';
export {
  EGRESS_PORT,
  execInSandbox,
  isSandboxAlive,
  killSandbox,
  nsenterArgs,
  prepareLayout,
  privilegedEnv,
  processStartTime,
  sandboxArgv,
  sandboxLayout,
  startSandbox,
} from './launcher.js';
export type { ExecSpec, SandboxHandle, SandboxLayout, SandboxSpec } from './launcher.js';
export { listenInSandbox, listenInSandboxMany, SandboxConnectError, type SandboxPort } from './netns.js';
export { INSTALL_TOOLS, inspectIsolation, missingTools } from './privileges.js';
export { HOST_TRUST_BUNDLE, hostsFile, TRUST_BUNDLE } from './rootfs.js';
export { checkSeccomp, SECCOMP_EXEC, seccompLoaderPath, seccompWrap, seccompWrapOnHost } from './seccomp.js';
export type { SeccompSummary } from './seccomp.js';
export type { IsolationReport } from './privileges.js';
export { simulatorSandboxArgv, type SimulatorMount, type SimulatorSandboxSpec } from './simulatorSandbox.js';
