import type { Workshop } from '../../../core/index.js';
import type { CommandContext } from '../../context.js';

/** `atelier workshops list` */
export async function listWorkshops(ctx: CommandContext): Promise<Workshop[]> {
  return (await (await ctx.api()).call('listWorkshops')).items;
}

/** `atelier workshops status ID` */
export async function workshopStatus(ctx: CommandContext, id: string): Promise<Workshop> {
  return (await ctx.api()).call('getWorkshop', { params: { id } });
}

/** `atelier workshops stop ID` (suspend) */
export async function stopWorkshop(ctx: CommandContext, id: string): Promise<Workshop> {
  return (await ctx.api()).call('stopWorkshop', { params: { id } });
}

/** `atelier workshops resume ID` */
export async function resumeWorkshop(ctx: CommandContext, id: string): Promise<Workshop> {
  return (await ctx.api()).call('resumeWorkshop', { params: { id } });
}

/** `atelier workshops delete ID` */
export async function deleteWorkshop(ctx: CommandContext, id: string): Promise<{ id: string; deleted: boolean }> {
  return (await ctx.api()).call('deleteWorkshop', { params: { id } });
}
