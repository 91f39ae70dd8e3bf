export { findPgBinDir, startEmbeddedPostgres } from './embedded.js';
export type { EmbeddedPostgres } from './embedded.js';
export { knownMigrations, migrate } from './migrate.js';
export { asDatabaseError, createPool, isUnavailable, queryRows, withTransaction } from './pool.js';
export type { Pool, PoolClient } from './pool.js';
export { listenChannel } from './bus.js';
export { lead } from './leader.js';
export type { Leadership } from './leader.js';
export type { NotificationBus } from './bus.js';
