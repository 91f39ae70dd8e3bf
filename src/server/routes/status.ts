import { statfsSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import type { ServerStatus } from '../../core/index.js';
import type { Pool } from '../../db/index.js';

export interface StatusDeps {
  pool: Pool;
  version: string;
  startedAt: Date;
  /** Known once the server listens. */
  url: () => string | undefined;
  publicUrl: () => string | undefined;
  dataDir: string;
  database: 'embedded' | 'external';
  recentErrors: () => ServerStatus['recentErrors'];
}

async function database(deps: StatusDeps): Promise<ServerStatus['database']> {
  try {
    const r = await deps.pool.query<{ version: string; size: string }>(
      "SELECT current_setting('server_version') AS version, pg_database_size(current_database())::text AS size",
    );
    const size = Number(r.rows[0]?.size);
    return { kind: deps.database, ok: true, version: r.rows[0]?.version ?? null, sizeBytes: Number.isFinite(size) ? size : null };
  } catch (err) {
    return { kind: deps.database, ok: false, version: null, sizeBytes: null, error: (err as Error).message };
  }
}

async function counts(pool: Pool, sql: string): Promise<Record<string, number>> {
  const r = await pool.query<{ k: string; n: string }>(sql);
  return Object.fromEntries(r.rows.map((row) => [row.k, Number(row.n)]));
}

/** GET /v1/admin/status (server admins): what `atelier server status` shows. */
export function statusRoutes(app: FastifyInstance, deps: StatusDeps): void {
  app.get('/v1/admin/status', { config: { access: { role: 'admin', platform: true } } }, async (): Promise<ServerStatus> => {
    const fs = statfsSync(deps.dataDir);
    const db = await database(deps);
    const workshops = db.ok ? await counts(deps.pool, 'SELECT status AS k, count(*) AS n FROM workshops GROUP BY status') : {};
    const simulators = db.ok
      ? await counts(deps.pool, "SELECT type AS k, count(*) AS n FROM workshop_simulators WHERE status = 'Running' GROUP BY type")
      : {};
    const url = deps.url() ?? '';
    return {
      version: deps.version,
      pid: process.pid,
      startedAt: deps.startedAt.toISOString(),
      uptimeSeconds: Math.round((Date.now() - deps.startedAt.getTime()) / 1000),
      url,
      publicUrl: deps.publicUrl() ?? url,
      dataDir: deps.dataDir,
      database: db,
      disk: { totalBytes: fs.blocks * fs.bsize, usedBytes: (fs.blocks - fs.bfree) * fs.bsize, freeBytes: fs.bavail * fs.bsize },
      workshops,
      simulators: { running: Object.values(simulators).reduce((a, b) => a + b, 0), byType: simulators },
      recentErrors: deps.recentErrors(),
    };
  });
}
