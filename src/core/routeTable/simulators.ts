// The route table's simulators routes (routes.ts puts the areas together).
import { z } from 'zod';
import { itemsOf, SimulatorView } from '../api.js';
import type { RouteDef } from '../routes.js';
import { SimulatorRequest } from '../schemas.js';

export const simulatorsRoutes = {
  listSimulators: {
    method: 'GET',
    path: '/v1/workshops/:id/simulators',
    summary: "a workshop's simulators: state, endpoint inside the workshop, memory",
    tag: 'simulators',
    auth: 'bearer',
    response: itemsOf(SimulatorView),
  },
  requestSimulator: {
    method: 'POST',
    path: '/v1/workshops/:id/simulators',
    summary: 'start one more simulator in a running workshop',
    tag: 'simulators',
    auth: 'bearer',
    body: SimulatorRequest,
    status: 201,
    response: SimulatorView,
  },
  simulatorLogs: {
    method: 'GET',
    path: '/v1/workshops/:id/simulators/:name/logs',
    summary: "the end of a simulator's own log (text)",
    tag: 'simulators',
    auth: 'bearer',
    query: z.object({ tail: z.number().int().min(1).max(1048576).optional().describe('bytes from the end (default 64 KiB)') }),
    produces: 'text/plain',
  },
  resetSimulator: {
    method: 'POST',
    path: '/v1/workshops/:id/simulators/:name/reset',
    summary: 'return a simulator to its initial state (a stopped or failed one is started again)',
    tag: 'simulators',
    auth: 'bearer',
    response: SimulatorView,
  },
  stopSimulator: {
    method: 'POST',
    path: '/v1/workshops/:id/simulators/:name/stop',
    summary: 'stop a simulator (its files kept) until a reset starts it again',
    tag: 'simulators',
    auth: 'bearer',
    response: SimulatorView,
  },
} as const satisfies Record<string, RouteDef>;
