// An approval request as read from the database (its row and its context), and as the API gives it.
import type { ApprovalCategory, ApprovalRequest, ApprovalStatus } from './types.js';

export interface Row {
  id: string;
  workshop_id: string;
  category: ApprovalCategory;
  requested_by: string;
  payload: Record<string, unknown>;
  status: ApprovalStatus;
  decided_by: string | null;
  decision_reason: string | null;
  created_at: Date;
  expires_at: Date;
  decided_at: Date | null;
  tenant_id: string;
  requester_user_id: string | null;
  effect_applied_at: Date | null;
  effect_error: string | null;
  due: boolean;
}

export const SELECT = `SELECT r.*, c.tenant_id, c.requester_user_id, c.effect_applied_at, c.effect_error,
                       (r.status = 'PENDING' AND r.expires_at <= now()) AS due
                  FROM hitl_requests r JOIN hitl_request_context c ON c.request_id = r.id`;

export function toApproval(r: Row): ApprovalRequest {
  return {
    id: r.id,
    workshopId: r.workshop_id,
    category: r.category,
    requestedBy: r.requested_by,
    payload: r.payload,
    status: r.status,
    decidedBy: r.decided_by,
    decisionReason: r.decision_reason,
    createdAt: r.created_at.toISOString(),
    expiresAt: r.expires_at.toISOString(),
    decidedAt: r.decided_at?.toISOString() ?? null,
    effect: { appliedAt: r.effect_applied_at?.toISOString() ?? null, error: r.effect_error },
  };
}
