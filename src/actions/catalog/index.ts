import type { ActionSpec } from '../types.js';
import { egressAllow, egressRemove } from './egress.js';
import { extrasInstallCommand } from './extras.js';
import { simulatorsCompose } from './simulators.js';
import { slotsAssign, slotsRemove } from './slots.js';
import { stackAutostart, stackRestart, stackStart, stackStop } from './stack.js';

/**
 * D1: the catalog is a table in code, action id → specification. A client names an action by
 * this id and sends parameters checked against its schema; it never sends a command or a path.
 */
export const CATALOG: Record<string, ActionSpec<never>> = Object.fromEntries(
  [
    simulatorsCompose,
    egressAllow,
    egressRemove,
    slotsAssign,
    slotsRemove,
    stackStart,
    stackStop,
    stackRestart,
    stackAutostart,
    extrasInstallCommand,
  ].map((a) => [a.id, a as unknown as ActionSpec<never>]),
);
