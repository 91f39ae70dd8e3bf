import type { Workshop } from '../../../core/index.js';
import { call } from '../../client.js';
import type { CommandContext } from '../../context.js';

const path = (id: string): string => `/v1/workshops/${encodeURIComponent(id)}`;

/** `atelier workshops list` */
export async function listWorkshops(ctx: CommandContext): Promise<Workshop[]> {
  return (await call<{ items: Workshop[] }>(await ctx.target(), { method: 'GET', path: '/v1/workshops' })).items;
}

/** `atelier workshops status ID` */
export async function workshopStatus(ctx: CommandContext, id: string): Promise<Workshop> {
  return call<Workshop>(await ctx.target(), { method: 'GET', path: path(id) });
}

/** `atelier workshops stop ID` (suspend) */
export async function stopWorkshop(ctx: CommandContext, id: string): Promise<Workshop> {
  return call<Workshop>(await ctx.target(), { method: 'POST', path: `${path(id)}/stop` });
}

/** `atelier workshops resume ID` */
export async function resumeWorkshop(ctx: CommandContext, id: string): Promise<Workshop> {
  return call<Workshop>(await ctx.target(), { method: 'POST', path: `${path(id)}/resume` });
}

/** `atelier workshops delete ID` */
export async function deleteWorkshop(ctx: CommandContext, id: string): Promise<{ id: string; deleted: boolean }> {
  return call<{ id: string; deleted: boolean }>(await ctx.target(), { method: 'DELETE', path: path(id) });
}
