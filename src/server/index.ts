export { startServer } from './start.js';
export type { RunningServer, StartOptions } from './start.js';
export { buildApp } from './app.js';
export { issueAcmeCertificate, issueLocalCertificate } from './certificates.js';
export type { IssuerFiles } from './certificates.js';
