export { startServer } from './start.js';
export type { RunningServer, StartOptions } from './start.js';
export { buildApp } from './app.js';
