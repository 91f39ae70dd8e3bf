import type { EgressRecord } from '../../../core/index.js';
import { ndjsonLines, raiseFor, request } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { table } from '../../output.js';

/** One decision of a workshop's egress proxy (GET /v1/workshops/:id/egress), as the server records it. */
export type { EgressRecord };

/** `atelier workshops egress ID [--limit N]`: the last decisions, oldest first. */
export async function listEgress(ctx: CommandContext, id: string, flags: { limit?: string }): Promise<EgressRecord[]> {
  const q: Record<string, string> = {};
  if (flags.limit !== undefined) q.limit = flags.limit;
  return (await (await ctx.api()).call('egressLog', { params: { id }, query: q })).items;
}

/**
 * `--follow`: prints each decision as it is made, until Ctrl-C. The server ends a follow after a
 * minute (or when the token expires); it is then resumed after the last decision seen, which
 * authenticates again (a refreshed token, or a clear error once it is revoked).
 */
export async function followEgress(
  ctx: CommandContext,
  id: string,
  flags: { limit?: string },
  print: (d: EgressRecord) => void,
): Promise<void> {
  let last: number | undefined;
  for (;;) {
    const q: Record<string, string> = { follow: 'true' };
    if (last !== undefined) q.after = String(last);
    else if (flags.limit !== undefined) q.limit = flags.limit;
    const req = (await ctx.api()).request('egressLog', { params: { id }, query: q, accept: 'application/x-ndjson' });
    const res = await request(await ctx.target(), req);
    await raiseFor(res);
    for await (const line of ndjsonLines(res)) {
      if (!line) continue;
      const d = JSON.parse(line) as EgressRecord;
      last = d.id;
      print(d);
    }
    last ??= 0;
  }
}

const COLUMNS = [
  { header: 'TIME', get: (d: EgressRecord) => d.at },
  { header: 'DECISION', get: (d: EgressRecord) => (d.allowed ? 'allowed' : d.outcome === 'unknown' ? 'denied (unknown)' : 'denied') },
  { header: 'HOST', get: (d: EgressRecord) => d.host || '(invalid)' },
  { header: 'PORT', get: (d: EgressRecord) => String(d.port) },
  { header: 'VIA', get: (d: EgressRecord) => d.protocol },
  { header: 'WHY', get: (d: EgressRecord) => `${d.reason}${d.entry ? ` (${d.entry})` : ''}` },
];

export function egressTable(items: EgressRecord[]): string {
  if (items.length === 0) return 'No egress decisions yet.';
  return table(items, COLUMNS);
}

/** One line per decision for --follow (no column alignment across lines). */
export function egressLine(d: EgressRecord): string {
  return COLUMNS.map((c) => c.get(d)).join('  ');
}
