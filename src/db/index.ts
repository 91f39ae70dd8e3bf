export { findPgBinDir, startEmbeddedPostgres } from './embedded.js';
export type { EmbeddedPostgres } from './embedded.js';
export { migrate } from './migrate.js';
export { asDatabaseError, createPool, isUnavailable, withTransaction } from './pool.js';
export type { Pool, PoolClient } from './pool.js';
