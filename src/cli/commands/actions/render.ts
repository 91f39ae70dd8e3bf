import type { ActionExecution, ActionPlan, CatalogItem } from '../../../actions/index.js';
import type { ActionJournalView } from '../../../core/index.js';
import { keyValues, table } from '../../output.js';

export function catalogTable(items: CatalogItem[]): string {
  const rows = table(items, [
    { header: 'ACTION', get: (a) => a.id },
    { header: 'CLASS', get: (a) => a.class },
    { header: 'PARAMETERS', get: (a) => a.parameters.map((p) => `${p.name}=<${p.type}>`).join(' ') || '-' },
    { header: 'READY', get: (a) => (a.preconditions.every((p) => p.ok) ? 'yes' : 'no') },
    {
      header: 'PRECONDITIONS',
      get: (a) => a.preconditions.map((p) => `${p.ok ? '✓' : '✗'} ${p.name}${p.ok ? '' : `: ${p.reason}`}`).join('; '),
    },
  ]);
  return rows;
}

export function planText(p: ActionPlan): string {
  const lines = [
    keyValues([
      ['plan', p.planId],
      ['action', `${p.actionId} (class ${p.class})`],
      ['project', p.project],
      ['fingerprint', p.fingerprint],
      ['expires', p.expiresAt],
      ['inverse', p.inverse],
    ]),
    '',
    'Effects, in order:',
  ];
  p.effects.forEach((e, i) => {
    switch (e.kind) {
      case 'file':
        lines.push(`${i + 1}. edit ${e.path} (${e.key})`, e.diff.replace(/\n$/, ''));
        break;
      case 'command':
        lines.push(
          `${i + 1}. command to run yourself (Atelier never runs it)${e.network ? ' [network: downloads packages]' : ''}:`,
          `   ${e.copy}`,
        );
        break;
      case 'service':
        lines.push(`${i + 1}. ${e.operation} stack ${e.stack}: ${e.argv.join(' ')}${e.network ? ' [network: pulls an image]' : ''}`);
        break;
    }
  });
  if (p.applyCommand) lines.push('', `apply it with: ${p.applyCommand}`);
  return lines.join('\n');
}

export function executionText(x: ActionExecution): string {
  const lines = [
    `${x.status === 'applied' || x.status === 'rolled_back' ? 'ok' : 'FAILED'}: ${x.message}`,
    keyValues([
      ['execution', x.executionId],
      ['status', x.status],
    ]),
  ];
  for (const c of x.verification.checks) lines.push(`  ${c.ok ? '✓' : '✗'} ${c.name}: ${c.detail}`);
  return lines.join('\n');
}

export function journalText(j: ActionJournalView): string {
  const out: string[] = [];
  if (j.executions.length === 0) out.push(`No executions in the journal of ${j.project} yet.`);
  else
    out.push(
      table(j.executions, [
        { header: 'EXECUTION', get: (e) => e.executionId },
        { header: 'ACTION', get: (e) => e.actionId },
        { header: 'STATUS', get: (e) => e.status },
        { header: 'STARTED', get: (e) => e.startedAt },
        { header: 'UNDO', get: (e) => (e.rollbackOffered ? `atelier actions rollback ${e.executionId}` : '-') },
      ]),
    );
  const interrupted = j.executions.filter((e) => e.status === 'interrupted');
  if (interrupted.length > 0)
    out.push(
      `warning: ${interrupted.length} execution(s) were interrupted (started, never finished): check the project and roll back if needed`,
    );
  if (j.tornLastLine) out.push('warning: the last journal line was cut (the server stopped while writing it) and is ignored');
  if (j.unreadableLines.length > 0) out.push(`warning: unreadable journal lines: ${j.unreadableLines.join(', ')}`);
  return out.join('\n');
}
