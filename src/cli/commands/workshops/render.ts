import { formatSize, type LlmSpend, type Workshop, type WorkshopDisk, type WorkshopEgressEntry } from '../../../core/index.js';
import { keyValues, printable, table } from '../../output.js';

function age(iso: string): string {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

export function workshopTable(items: Workshop[]): string {
  if (items.length === 0) return 'No workshops. Create one with `atelier workshops create --repo PATH`.';
  return table(items, [
    { header: 'ID', get: (w) => w.id },
    { header: 'NAME', get: (w) => w.name },
    // A dead or failed workshop says why at a glance (the reason's first words: killed, out of memory, …).
    { header: 'STATUS', get: (w) => (w.status === 'Dead' && w.statusReason ? `Dead (${w.statusReason.split(':')[0]})` : w.status) },
    { header: 'NODE', get: (w) => w.node },
    { header: 'AGE', get: (w) => age(w.createdAt) },
    { header: 'REPO', get: (w) => w.repo },
  ]);
}

function diskLine(d: WorkshopDisk): string {
  if (!d.enforced || d.quotaBytes === null) return d.note ?? 'not enforced';
  const used = d.usedBytes ?? 0;
  return `${formatSize(used)} of ${formatSize(d.quotaBytes)} used (${Math.round((100 * used) / Math.max(1, d.quotaBytes))}%)`;
}

export function workshopDetail(w: Workshop): string {
  const pairs: [string, string][] = [
    ['id', w.id],
    ['name', w.name],
    ['status', w.status],
  ];
  if (w.statusReason) pairs.push(['reason', w.statusReason]);
  pairs.push(['node', w.placement ? `${w.node} (${w.placement})` : w.node]);
  pairs.push(
    ['repo', w.repo],
    ['cpus', String(w.limits.cpus)],
    ['memory', `${Math.round(w.limits.memoryBytes / 2 ** 20)}m`],
    ['pids', String(w.limits.pids)],
    ...(w.disk ? ([['disk', diskLine(w.disk)]] as [string, string][]) : []),
    ['budget', w.budgetUsd === null ? 'none' : `$${w.budgetUsd.toFixed(2)} (enforced by the LLM gateway)`],
    ['llm spend', llmLine(w.llm)],
  );
  if (w.forwardPorts.length > 0) pairs.push(['forward ports', w.forwardPorts.join(', ')]);
  pairs.push(['created', w.createdAt]);
  let out = keyValues(pairs);
  out += `\n${egressPolicy(w.egress.policy)}`;
  for (const warning of w.warnings) out += `\nwarning: ${warning}`;
  return out;
}

function llmLine(s: LlmSpend): string {
  if (s.requests === 0) return 'none';
  const unreported = s.requestsWithoutUsage > 0 ? ` (${s.requestsWithoutUsage} reported no usage)` : '';
  return `$${s.spentUsd.toFixed(4)} in ${s.requests} model request${s.requests === 1 ? '' : 's'}${unreported}, ${s.inputTokens} tokens in, ${s.outputTokens} out`;
}

function origin(e: WorkshopEgressEntry): string {
  if (e.origin === 'platform') return 'platform (server configuration)';
  if (e.origin === 'project') return 'project (atelier.yaml)';
  const a = e.approval;
  if (!a?.requestId) return 'approval (who and when not recorded)';
  return `approval by ${a.decidedBy ?? 'unknown'} at ${a.decidedAt ?? 'unknown'}, request ${a.requestId}`;
}

/**
 * The live egress policy, one entry a line with where it came from. Entries and deciders may be
 * agent-written (an approved request's host): printed escaped, never as terminal control sequences.
 */
export function egressPolicy(policy: WorkshopEgressEntry[]): string {
  if (policy.length === 0) return 'egress policy: nothing allowed (no platform, project or approved entry)';
  const rows = policy.map((e) => ({ rule: e.rule === 'allowRange' ? 'range' : e.rule, entry: e.entry, from: origin(e) }));
  const body = table(rows, [
    { header: 'RULE', get: (r) => r.rule },
    { header: 'ENTRY', get: (r) => printable(r.entry) },
    { header: 'FROM', get: (r) => printable(r.from) },
  ]);
  return `egress policy:\n${body
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n')}`;
}
