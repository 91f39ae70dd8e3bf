// The audit chain's check (`atelier audit verify`): every row's hash and its link to the row
// before, and each request's last audited state against the state it is in now.
import { queryRows, type Pool } from '../db/index.js';

export interface AuditVerification {
  ok: boolean;
  rows: number;
  problems: { seq: number | null; requestId: string | null; problem: string }[];
}

/**
 * Recomputes every audit row's hash and the chain between rows, and checks that each
 * request's last audited state is the state it is in now. Any edit made behind the triggers'
 * back (a superuser, a restored backup) shows up here.
 */
export async function verifyAuditChain(pool: Pool): Promise<AuditVerification> {
  const problems: AuditVerification['problems'] = [];
  const rows = await queryRows<{ seq: string; request_id: string; prev_hash: string; hash: string; computed: string }>(
    pool,
    'SELECT seq, request_id, prev_hash, hash, hitl_audit_digest(a) AS computed FROM hitl_audit a ORDER BY seq',
  );
  let prev = '0'.repeat(64);
  let expected = 1;
  for (const r of rows) {
    const seq = Number(r.seq);
    if (seq !== expected) problems.push({ seq, requestId: r.request_id, problem: `row ${expected} is missing (next is ${seq})` });
    if (r.prev_hash !== prev) problems.push({ seq, requestId: r.request_id, problem: 'does not chain to the row before it' });
    if (r.computed !== r.hash) problems.push({ seq, requestId: r.request_id, problem: 'content does not match its hash (edited)' });
    prev = r.hash;
    expected = seq + 1;
  }
  const states = await queryRows<{ id: string; last: string | null; now: string }>(
    pool,
    `SELECT h.id, (SELECT a.request_hash FROM hitl_audit a WHERE a.request_id = h.id ORDER BY a.seq DESC LIMIT 1) AS last,
            hitl_request_digest(h) AS now
       FROM hitl_requests h`,
  );
  for (const s of states) {
    if (s.last === null) problems.push({ seq: null, requestId: s.id, problem: 'request has no audit row' });
    else if (s.last !== s.now) problems.push({ seq: null, requestId: s.id, problem: 'request differs from its last audited state' });
  }
  return { ok: problems.length === 0, rows: rows.length, problems };
}
