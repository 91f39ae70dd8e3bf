import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import {
  AtelierError,
  isErrorCode,
  type CreatePhaseEvent,
  type CreateWorkshopFrame,
  type CreateWorkshopRequest,
  type Workshop,
} from '../../../core/index.js';
import { ndjsonLines, raiseFor, readBody, request } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { parseSimulatorFlag } from '../simulators/manage.js';

export interface CreateFlags {
  repo: string;
  name?: string;
  devcontainer?: string;
  budget?: string;
  cpus?: string;
  memory?: string;
  pids?: string;
  disk?: string;
  node?: string;
  simulator?: string[];
}

function number(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new AtelierError('INVALID_ARGUMENT', `--${flag} must be a number, got "${value}"`, { field: flag });
  return n;
}

/**
 * `atelier workshops create`: local paths are made absolute here, URLs go as they are. With
 * `onPhase`, the server streams the creation's phases (NDJSON) and each is handed to it as it comes.
 */
export async function createWorkshop(ctx: CommandContext, flags: CreateFlags, onPhase?: (e: CreatePhaseEvent) => void): Promise<Workshop> {
  const isUrl = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(flags.repo) || /^[^/\s]+@[^/\s]+:/.test(flags.repo);
  const repo = isUrl ? flags.repo : resolve(flags.repo);
  if (!isUrl && !existsSync(repo))
    throw new AtelierError('REPO_NOT_FOUND', `repo ${flags.repo} does not exist on this machine`, { field: 'repo' });
  const body: CreateWorkshopRequest = { repo };
  if (flags.name !== undefined) body.name = flags.name;
  if (flags.devcontainer !== undefined) body.devcontainer = flags.devcontainer;
  const budget = number('budget', flags.budget);
  if (budget !== undefined) body.budgetUsd = budget;
  const cpus = number('cpus', flags.cpus);
  if (cpus !== undefined) body.cpus = cpus;
  if (flags.memory !== undefined) body.memory = flags.memory;
  const pids = number('pids', flags.pids);
  if (pids !== undefined) body.pids = pids;
  if (flags.disk !== undefined) body.disk = flags.disk;
  if (flags.node !== undefined) body.node = flags.node;
  if (flags.simulator && flags.simulator.length > 0) body.simulators = flags.simulator.map(parseSimulatorFlag);
  const api = await ctx.api();
  if (!onPhase) return api.call('createWorkshop', { body });
  const target = await ctx.target();
  const { path } = api.request('createWorkshop', { body });
  const res = await request(target, { method: 'POST', path, body, accept: 'application/x-ndjson' });
  await raiseFor(res, target);
  // A server from before the phases answers the workshop at once, as one JSON document.
  if (!String(res.headers['content-type'] ?? '').includes('application/x-ndjson'))
    return JSON.parse((await readBody(res)).toString('utf8')) as Workshop;
  for await (const line of ndjsonLines(res)) {
    if (!line) continue;
    const frame = JSON.parse(line) as CreateWorkshopFrame;
    if ('workshop' in frame) return frame.workshop;
    if ('error' in frame) throw new AtelierError(isErrorCode(frame.error.code) ? frame.error.code : 'INTERNAL', frame.error.message);
    onPhase(frame);
  }
  throw new AtelierError(
    'UNAVAILABLE',
    'the connection to the server ended before the workshop was made: see `atelier workshops list` for what became of it',
  );
}
