// The route table's dashboard routes (routes.ts puts the areas together).
import { ConsoleCatalog, ConsoleRequest, ConsoleResult, CsrfToken } from '../api.js';
import type { RouteDef } from '../routes.js';

export const dashboardRoutes = {
  csrfToken: {
    method: 'GET',
    path: '/api/workspace/csrf',
    summary: "the dashboard's CSRF token (also set as a cookie)",
    tag: 'dashboard',
    auth: 'bearer',
    response: CsrfToken,
  },
  consoleCatalog: {
    method: 'GET',
    path: '/api/workspace/console',
    summary: "the dashboard Console's read-only commands",
    tag: 'dashboard',
    auth: 'bearer',
    response: ConsoleCatalog,
  },
  runConsole: {
    method: 'POST',
    path: '/api/workspace/console',
    summary: 'run one read-only `atelier` command for the dashboard Console',
    tag: 'dashboard',
    auth: 'bearer',
    body: ConsoleRequest,
    response: ConsoleResult,
  },
} as const satisfies Record<string, RouteDef>;
