export { LocalDriver } from './local/driver.js';
export type { EnterSpec, SandboxEntry, StartRequest, WorkshopDriver } from './driver.js';
export { WorkshopService } from './service.js';
// In progress (docs/kubernetes.md): the `Workshop` resource's controller, off unless configured.
export { startWorkshopResource } from './kubernetes/workshopResource.js';
export { WorkshopEvents, type WorkshopEvent, type WorkshopEventType, type WorkshopListener } from './events.js';
export type { EgressWiring, ExecGate, NodeDirectory, RunningExec, ServiceOptions } from './service.js';
export { readDevcontainer } from './devcontainer.js';
export { resolveRepoSource } from './repo.js';
export { InternalNetwork } from './internal.js';
export { SimulatorManager, type SimulatorView } from './simulators.js';
export {
  ExecLog,
  StartExecRequest,
  MAX_EXEC_OUTPUT_BYTES,
  MAX_EXEC_WAIT_SECONDS,
  EXEC_RETENTION_DAYS,
  type ExecView,
  type ExecChunk,
  type ExecStatus,
} from './execLog.js';
export { SecretStore, checkSecretName, DEFAULT_GRANT_SECONDS, SECRETS_DIR, type SecretInfo, type LocalSandbox } from './secrets.js';
export { CredentialPolicies, type PlatformAllows } from './credentialPolicy.js';
export { Publisher } from './publish.js';
export { SpendLedger } from './spend.js';
