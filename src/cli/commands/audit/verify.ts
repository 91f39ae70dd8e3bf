import type { AuditVerification } from '../../../approvals/index.js';
import type { CommandContext } from '../../context.js';

/** `atelier audit verify`: the server recomputes the approvals audit chain (admin of the default tenant). */
export async function verifyAudit(ctx: CommandContext): Promise<AuditVerification> {
  return (await ctx.api()).call('verifyAudit');
}

export function verificationText(v: AuditVerification): string {
  if (v.ok) return `audit intact: ${v.rows} rows, every hash and link checks out`;
  return [
    `audit TAMPERED: ${v.problems.length} problem(s) in ${v.rows} rows`,
    ...v.problems.map((p) => `  ${p.seq !== null ? `row ${p.seq}` : 'request'}${p.requestId ? ` (${p.requestId})` : ''}: ${p.problem}`),
  ].join('\n');
}
