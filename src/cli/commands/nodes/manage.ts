import { formatSize, type NodeView } from '../../../core/index.js';
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
    { header: 'STATE', get: (n) => n.state },
  ]);
}
