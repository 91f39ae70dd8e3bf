export {
  applyServerReserve,
  cgroupBase,
  cgroupSupport,
  cgroupUsage,
  childCgroups,
  createCgroups,
  destroyCgroups,
  freeze,
  isFrozen,
  procsFiles,
  thaw,
  workshopCgroups,
  WORKSHOP_OOM_SCORE_ADJ,
} from './cgroups.js';
export type { AppliedReserve, CgroupPaths, CgroupUsage, ServerReserve } from './cgroups.js';
export { diskUsage, freeBytes, isMountPoint, WorkshopDisks } from './disk.js';
export type { DiskUsage, Runner, WorkshopDisksOptions } from './disk.js';
export {
  EGRESS_PORT,
  entryOf,
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
export { INSTALL_TOOLS, inspectIsolation, missingTools, protectFromOomKiller, SERVER_OOM_SCORE_ADJ } from './privileges.js';
export { HOST_TRUST_BUNDLE, hostsFile, TRUST_BUNDLE } from './rootfs.js';
/** The directory of a workshop's run directory whose `*.sh` snippets its login shells source (/etc/profile.d). */
export { LOGIN_PROFILE_SUBDIR } from './rootfs.js';
export { checkSeccomp, SECCOMP_EXEC, seccompLoaderPath, seccompWrap, seccompWrapOnHost } from './seccomp.js';
export type { SeccompSummary } from './seccomp.js';
export type { IsolationReport } from './privileges.js';
export { simulatorSandboxArgv, type SimulatorMount, type SimulatorSandboxSpec } from './simulatorSandbox.js';
