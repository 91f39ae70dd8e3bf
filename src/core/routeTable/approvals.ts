// The route table's approvals routes (routes.ts puts the areas together).
import { z } from 'zod';
import {
  APPROVAL_CATEGORIES,
  APPROVAL_STATUSES,
  ApprovalAuditEntry,
  ApprovalRequestSchema,
  AuditVerification,
  CreateApprovalRequest,
  DecideApprovalRequest,
  itemsOf,
} from '../api.js';
import { CONCERNS_ME } from './shared.js';
import type { RouteDef } from '../routes.js';

export const approvalsRoutes = {
  createApproval: {
    method: 'POST',
    path: '/v1/workshops/:id/approvals',
    summary: 'file a request that waits for a human',
    tag: 'approvals',
    auth: 'bearer',
    body: CreateApprovalRequest,
    status: 201,
    response: ApprovalRequestSchema,
  },
  listApprovals: {
    method: 'GET',
    path: '/v1/approvals',
    summary: 'approval requests of the tenant, newest first',
    tag: 'approvals',
    auth: 'bearer',
    query: z.object({
      status: z.enum(APPROVAL_STATUSES).optional(),
      category: z.enum(APPROVAL_CATEGORIES).optional(),
      workshop: z.string().min(1).optional().describe('only this workshop'),
      limit: z.number().int().min(1).max(1000).optional().describe('how many (default 100)'),
      concerns: CONCERNS_ME,
    }),
    response: itemsOf(ApprovalRequestSchema),
  },
  getApproval: {
    method: 'GET',
    path: '/v1/approvals/:id',
    summary: 'one approval request',
    tag: 'approvals',
    auth: 'bearer',
    response: ApprovalRequestSchema,
  },
  waitApproval: {
    method: 'GET',
    path: '/v1/approvals/:id/wait',
    summary: 'the request once decided or expired, or as it is after `timeout` seconds',
    tag: 'approvals',
    auth: 'bearer',
    query: z.object({ timeout: z.number().min(0).max(300).optional().describe('seconds (default 30)') }),
    response: ApprovalRequestSchema,
  },
  approvalAudit: {
    method: 'GET',
    path: '/v1/approvals/:id/audit',
    summary: "a request's audit trail, oldest first: what happened, who, channel, address, time (people only)",
    tag: 'approvals',
    auth: 'bearer',
    response: itemsOf(ApprovalAuditEntry),
  },
  decideApproval: {
    method: 'POST',
    path: '/v1/approvals/:id/decision',
    summary: 'approve or reject a request (never the one who asked)',
    tag: 'approvals',
    auth: 'bearer',
    body: DecideApprovalRequest,
    response: ApprovalRequestSchema,
  },
  approvalStream: {
    method: 'GET',
    path: '/v1/approvals/stream',
    summary: 'live approval events (WebSocket, one JSON text frame per event)',
    tag: 'approvals',
    auth: 'bearer',
    query: z.object({ concerns: CONCERNS_ME }),
    produces: 'websocket',
  },
  verifyAudit: {
    method: 'GET',
    path: '/v1/audit/verify',
    summary: 'recompute the hash chain of the approvals audit (server admins)',
    tag: 'approvals',
    auth: 'bearer',
    response: AuditVerification,
  },
} as const satisfies Record<string, RouteDef>;
