export {
  checkSimulatorRequest,
  checkSimulatorVersion,
  isAlive,
  redactSimulatorEnv,
  dropSimulatorSpares,
  removeSimulator,
  resetSimulator,
  seedSimulatorSpares,
  simulatorLogs,
  simulatorPort,
  startSimulator,
  stopSimulator,
  warmSimulators,
} from './lifecycle.js';
export { processTree } from './process.js';
export { runOffServer } from './spawner.js';
/** True when a path is a unix socket itself, not a link to one: what may be dialled for a simulator. */
export { isSocket } from './socketGuard.js';
export { AWS_SERVICES, DEFAULT_SIMULATOR_NAMES, SIMULATOR_TYPES } from './types.js';
export type { SimulatorAsked, StartTimings } from './lifecycle.js';
export type { AwsService, RunAs, SimulatorHandle, SimulatorMount, SimulatorSandbox, SimulatorSpec, SimulatorType } from './types.js';
