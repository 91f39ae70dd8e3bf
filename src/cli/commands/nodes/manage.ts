import { formatSize, type NodeRemoval, type NodeView } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';
import { table } from '../../output.js';

/** `atelier nodes list` */
export async function listNodes(ctx: CommandContext): Promise<NodeView[]> {
  return (await (await ctx.api()).call('listNodes')).items;
}

/** `atelier nodes drain|undrain NAME` */
export async function setDraining(ctx: CommandContext, name: string, draining: boolean): Promise<NodeView> {
  return (await ctx.api()).call(draining ? 'drainNode' : 'undrainNode', { params: { name } });
}

/** `atelier nodes remove NAME` */
export async function removeNode(ctx: CommandContext, name: string): Promise<NodeRemoval> {
  return (await ctx.api()).call('removeNode', { params: { name } });
}

/** What the removal did, and what is left to do about the node's workshops. */
export function removalText(r: NodeRemoval): string {
  const head = `node ${r.name} (${r.id}, last heartbeat ${r.lastHeartbeatAt}) is removed from the installation.`;
  if (r.workshops.length === 0) return `${head}\nIt ran no workshops.`;
  const n = r.workshops.length;
  return [
    head,
    `Its ${n === 1 ? 'workshop stays' : `${n} workshops stay`} listed as NodeUnreachable, kept as ${n === 1 ? 'it was' : 'they were'}:`,
    ...r.workshops.map((w) => `  ${w.id}  ${w.name}  (was ${w.status})`),
    `Their files were on ${r.name}. \`atelier workshops delete ID\` forgets one (its record, approvals and tokens, from any node);`,
    `${r.name} started again with its data dir joins again, with those not deleted.`,
  ].join('\n');
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(1))}s`;
}

function ago(iso: string): string {
  return `${Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000))}s ago`;
}

export function nodeTable(nodes: NodeView[]): string {
  if (nodes.length === 0) return 'No nodes.';
  return table(nodes, [
    { header: 'NAME', get: (n) => (n.self ? `${n.name} *` : n.name) },
    { header: 'ADDRESS', get: (n) => n.address },
    { header: 'VERSION', get: (n) => `${n.version} (protocol ${n.protocol})` },
    { header: 'MEMORY FREE', get: (n) => `${formatSize(n.memoryFreeBytes)} of ${formatSize(n.memoryTotalBytes)}` },
    { header: 'WORKSHOPS', get: (n) => String(n.workshops) },
    { header: 'HEARTBEAT', get: (n) => ago(n.heartbeatAt) },
    // Its own settings: a node set unlike the others judges them by another time.
    {
      header: 'EVERY / DEAD AFTER',
      get: (n) => (n.heartbeatMs === null ? '(defaults)' : `${seconds(n.heartbeatMs)} / ${seconds(n.deadAfterMs ?? 0)}`),
    },
    { header: 'STATE', get: (n) => n.state },
  ]);
}
