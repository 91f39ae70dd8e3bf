import type { FastifyInstance } from 'fastify';
import { AtelierError, ConsoleRequest } from '../../core/index.js';
import type { RouteAccess } from '../../identity/index.js';
import { ALLOWED, runConsoleCommand } from '../console.js';
import { parse, principalOf } from './common.js';

export interface ConsoleRoutesDeps {
  /** The server's own local URL (known once it listens). */
  url(): string | undefined;
  /** The CLI's entry script the commands run with (StartOptions.cliEntry). */
  cli: string;
}

/**
 * Any human member of the tenant (viewer and up), never an agent token. The command runs with
 * the caller's own credential, so the Console grants nothing the caller cannot already do with
 * the CLI; it spawns a process, hence the bounds on concurrency, time and output.
 */
const READ: RouteAccess = { role: 'viewer' };

const PER_USER = 2;
const PER_SERVER = 4;

/** The dashboard Console's server side: POST /api/workspace/console runs one read-only ALLOWED command. */
export function consoleRoutes(app: FastifyInstance, deps: ConsoleRoutesDeps): void {
  const running = new Map<string, number>();
  let total = 0;

  app.get('/api/workspace/console', { config: { access: READ } }, async () => ({
    allowed: ALLOWED.map((c) => ({
      command: c.command.join(' '),
      arguments: c.positionals,
      flags: Object.keys(c.flags),
    })),
  }));

  app.post('/api/workspace/console', { config: { access: READ } }, async (request) => {
    const body = parse(ConsoleRequest, request.body);
    const p = principalOf(request);
    // A bearer token, or the dashboard session's own (the Console page is cookie-authenticated).
    const token = /^Bearer\s+(\S+)$/i.exec(request.headers.authorization ?? '')?.[1] ?? request.sessionToken;
    const url = deps.url();
    if (!token || !url) throw new AtelierError('UNAVAILABLE', 'the Console is not ready: try again in a moment');
    const mine = running.get(p.userId) ?? 0;
    if (mine >= PER_USER || total >= PER_SERVER)
      throw new AtelierError('RATE_LIMITED', `at most ${PER_USER} Console commands run at once per user: wait for one to end`);
    running.set(p.userId, mine + 1);
    total++;
    try {
      return await runConsoleCommand(body.argv, { cli: deps.cli, url, token, tenant: p.tenantName, output: body.output });
    } finally {
      total--;
      const left = (running.get(p.userId) ?? 1) - 1;
      if (left === 0) running.delete(p.userId);
      else running.set(p.userId, left);
    }
  });
}
