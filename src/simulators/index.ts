export { isAlive, removeSimulator, resetSimulator, simulatorLogs, startSimulator, stopSimulator, warmSimulators } from './lifecycle.js';
export { processTree } from './process.js';
export { SIMULATOR_TYPES } from './types.js';
export type { RunAs, SimulatorHandle, SimulatorSpec, SimulatorType } from './types.js';
