import { resolve } from 'node:path';
import type { Project } from '../../../actions/index.js';
import { call } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { table } from '../../output.js';

export type { Project };

/** `atelier projects add PATH [--name N]`: registers a directory of the server's machine (atelier.yaml created if absent). */
export async function addProject(
  ctx: CommandContext,
  path: string,
  flags: { name?: string },
): Promise<{ project: Project; created: boolean }> {
  return call(await ctx.target(), {
    method: 'POST',
    path: '/v1/projects',
    body: { path: resolve(path), ...(flags.name ? { name: flags.name } : {}) },
  });
}

export async function listProjects(ctx: CommandContext): Promise<Project[]> {
  return (await call<{ items: Project[] }>(await ctx.target(), { method: 'GET', path: '/v1/projects' })).items;
}

/** `atelier projects remove P`: forgets the project; its files stay as they are. */
export async function removeProject(ctx: CommandContext, ref: string): Promise<{ project: Project; removed: boolean }> {
  return call(await ctx.target(), { method: 'DELETE', path: `/v1/projects/${encodeURIComponent(ref)}` });
}

export function projectTable(items: Project[]): string {
  if (items.length === 0) return 'No projects yet: register one with `atelier projects add PATH`.';
  return table(items, [
    { header: 'NAME', get: (p) => p.name },
    { header: 'ID', get: (p) => p.id },
    { header: 'PATH', get: (p) => p.path },
  ]);
}
