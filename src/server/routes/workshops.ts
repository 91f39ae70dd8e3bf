import type { FastifyInstance } from 'fastify';
import type { WorkshopService } from '../../workshops/index.js';
import type { ApprovalService } from '../../approvals/index.js';
import type { Cluster } from '../relay.js';
import { egressRoutes } from './workshops/egress.js';
import { execRoutes } from './workshops/exec.js';
import { fileRoutes, gitRoutes } from './workshops/files.js';
import { lifecycleRoutes } from './workshops/lifecycle.js';
import { spendRoutes } from './workshops/spend.js';
import { usageRoutes } from './workshops/usage.js';

/** REST routes for workshops under /v1 (bearer token required; see app.ts). */
export function workshopRoutes(app: FastifyInstance, service: WorkshopService, approvals?: ApprovalService, cluster?: Cluster): void {
  // In this order (the order of /v1/admin/routes).
  lifecycleRoutes(app, service, cluster);
  usageRoutes(app, service);
  execRoutes(app, service, approvals);
  fileRoutes(app, service);
  egressRoutes(app, service);
  gitRoutes(app, service);
  spendRoutes(app, service);
}
