import { resolve } from 'node:path';
import type { Project } from '../../../actions/index.js';
import type { CommandContext } from '../../context.js';
import { table } from '../../output.js';

export type { Project };

/** `atelier projects add PATH [--name N]`: registers a directory of the server's machine (atelier.yaml created if absent). */
export async function addProject(
  ctx: CommandContext,
  path: string,
  flags: { name?: string },
): Promise<{ project: Project; created: boolean }> {
  return (await ctx.api()).call('addProject', { body: { path: resolve(path), ...(flags.name ? { name: flags.name } : {}) } });
}

export async function listProjects(ctx: CommandContext): Promise<Project[]> {
  return (await (await ctx.api()).call('listProjects')).items;
}

/** `atelier projects remove P`: forgets the project; its files stay as they are. */
export async function removeProject(ctx: CommandContext, ref: string): Promise<{ project: Project; removed: boolean }> {
  return (await ctx.api()).call('removeProject', { params: { project: ref } });
}

export function projectTable(items: Project[]): string {
  if (items.length === 0) return 'No projects yet: register one with `atelier projects add PATH`.';
  return table(items, [
    { header: 'NAME', get: (p) => p.name },
    { header: 'ID', get: (p) => p.id },
    { header: 'PATH', get: (p) => p.path },
  ]);
}
