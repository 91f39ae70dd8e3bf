import { existsSync, statSync } from 'node:fs';
import { z } from 'zod';
import { AtelierError } from '../../core/index.js';
import { unifiedDiff } from '../diff.js';
import {
  ensureRuntimeDir,
  fileState,
  readProjectFile,
  readSnapshot,
  removeProjectFile,
  sha256,
  writeProjectFile,
  writeSnapshot,
} from '../projectFiles.js';
import { renderedPath, renderTemplate, restartPolicy, STACKS, type StackId } from '../stacks.js';
import type { ActionEnv, ActionSpec, Effect, Inverse, ObservedEffect, Precondition, Verification } from '../types.js';
import { readYamlMapping, setKey } from '../yamlEdit.js';

const Stack = z.strictObject({ stack: z.enum(STACKS) });
type StackParams = z.infer<typeof Stack>;
const stackHelp = { name: 'stack', type: STACKS.join('|'), required: true, description: "a stack of the kit's templates (deploy/stacks)" };
function base(env: ActionEnv, params: StackParams | undefined): Precondition[] {
  const dirOk = existsSync(env.project.path) && statSync(env.project.path).isDirectory();
  const list: Precondition[] = [
    { name: 'project directory present', ok: dirOk, reason: dirOk ? env.project.path : `${env.project.path} does not exist any more` },
  ];
  for (const stack of params ? [params.stack] : STACKS) list.push(...env.stacks.preconditions(env.project, stack));
  return list;
}

function state(env: ActionEnv, stack: StackId): 'running' | 'stopped' {
  return env.stacks.running(env.project, stack) ? 'running' : 'stopped';
}

/** The state as a precondition: a backend that cannot tell (an engine down) makes it false, with its reason. */
function stateCheck(env: ActionEnv, stack: StackId): { state?: 'running' | 'stopped'; failed?: Precondition } {
  try {
    return { state: state(env, stack) };
  } catch (err) {
    return { failed: { name: `${stack} state readable`, ok: false, reason: (err as Error).message } };
  }
}

function inputsOf(env: ActionEnv, stack: StackId): Record<string, string> {
  return { [`stack ${stack}`]: state(env, stack), [renderedPath(stack)]: fileState(env.project.path, renderedPath(stack)) };
}

function refuse(failed: Precondition[], id: string): AtelierError {
  return new AtelierError('PRECONDITION_FAILED', `${id} cannot be planned: ${failed.map((p) => `${p.name}: ${p.reason}`).join('; ')}`, {
    preconditions: failed,
  });
}

/** The rendered file, created from the template when the project has none yet. */
function ensureRendered(env: ActionEnv, stack: StackId): ObservedEffect[] {
  if (readProjectFile(env.project.path, renderedPath(stack)) !== null) return [];
  ensureRuntimeDir(env.project.path, 'stacks');
  const text = renderTemplate(stack, env.project);
  writeProjectFile(env.project.path, renderedPath(stack), text);
  return [{ kind: 'file', path: renderedPath(stack), beforeSha256: null, afterSha256: sha256(text) }];
}

function renderEffect(env: ActionEnv, stack: StackId): Effect[] {
  if (readProjectFile(env.project.path, renderedPath(stack)) !== null) return [];
  const text = renderTemplate(stack, env.project);
  return [
    {
      kind: 'file',
      path: renderedPath(stack),
      key: '(rendered from the template)',
      beforeSha256: null,
      afterSha256: sha256(text),
      diff: unifiedDiff(renderedPath(stack), null, text),
    },
  ];
}

async function probe(env: ActionEnv, stack: StackId, want: 'running' | 'stopped'): Promise<Verification> {
  if (want === 'stopped') {
    const running = env.stacks.running(env.project, stack);
    return {
      ok: !running,
      checks: [{ name: `${stack} stopped`, ok: !running, detail: running ? 'still runs' : 'not running; its data is kept' }],
    };
  }
  const p = await env.stacks.probe(env.project, stack);
  return { ok: p.ok, checks: [{ name: `${stack} answers`, ok: p.ok, detail: p.detail }] };
}

async function bringTo(env: ActionEnv, stack: StackId, want: 'running' | 'stopped'): Promise<ObservedEffect[]> {
  if (state(env, stack) === want) return [];
  if (want === 'stopped') return env.stacks.run(env.project, stack, 'stop');
  return [...ensureRendered(env, stack), ...(await env.stacks.run(env.project, stack, 'start'))];
}

function serviceRollback(): NonNullable<ActionSpec['rollback']> {
  return async (env, inverse) => {
    if (inverse.kind !== 'service') throw new AtelierError('UNSUPPORTED', 'this execution recorded no service state to restore');
    const stack = inverse.stack as StackId;
    const effects: ObservedEffect[] = [];
    if (inverse.file) effects.push(...restoreFile(env, inverse.file));
    if (inverse.file && state(env, stack) === 'running' && inverse.state === 'running')
      // The restored file takes effect only when the service is recreated.
      effects.push(...(await env.stacks.run(env.project, stack, 'recreate')));
    else effects.push(...(await bringTo(env, stack, inverse.state)));
    return { effects, verification: await probe(env, stack, inverse.state) };
  };
}

function restoreFile(env: ActionEnv, inverse: Inverse & { kind: 'restore-file' }): ObservedEffect[] {
  const root = env.project.path;
  const now = fileState(root, inverse.path);
  const beforeState = inverse.beforeSha256 ?? 'absent';
  if (now === beforeState) return [];
  if (now !== inverse.afterSha256)
    throw new AtelierError(
      'ROLLBACK_CONFLICT',
      `${inverse.path} was edited by someone else since this action was applied: nothing was changed; undo by hand`,
      {
        path: inverse.path,
      },
    );
  if (inverse.snapshot === null) {
    removeProjectFile(root, inverse.path);
    return [{ kind: 'file', path: inverse.path, beforeSha256: now, afterSha256: 'absent' }];
  }
  const prior = readSnapshot(root, inverse.snapshot);
  writeProjectFile(root, inverse.path, prior);
  return [{ kind: 'file', path: inverse.path, beforeSha256: now, afterSha256: sha256(prior) }];
}

function serviceAction(id: 'stack.start' | 'stack.stop' | 'stack.restart', title: string): ActionSpec<StackParams> {
  const need = id === 'stack.start' ? 'stopped' : 'running';
  return {
    id,
    class: 'B',
    title,
    parameters: Stack,
    parameterHelp: [stackHelp],
    effectKinds: id === 'stack.start' ? ['file', 'service'] : ['service'],
    inverseDescription:
      id === 'stack.start'
        ? 'stop the stack again (its data is kept)'
        : id === 'stack.stop'
          ? 'start the stack again, on the same data'
          : 'none needed: the stack ends as it was (running); the rollback checks that it runs',
    preconditions(env, params) {
      const list = base(env, params);
      if (params) {
        const { state: now, failed } = stateCheck(env, params.stack);
        if (failed) list.push(failed);
        else list.push({ name: `stack ${now === need ? 'is' : 'is not'} ${need}`, ok: now === need, reason: `${params.stack} is ${now}` });
      }
      return list;
    },
    inputs: (env, params) => inputsOf(env, params.stack),
    plan(env, params) {
      const failed = this.preconditions(env, params).filter((p) => !p.ok);
      if (failed.length > 0) throw refuse(failed, id);
      const op = id === 'stack.start' ? 'start' : id === 'stack.stop' ? 'stop' : 'restart';
      const service: Effect = {
        kind: 'service',
        stack: params.stack,
        operation: op,
        argv: env.stacks.argv(env.project, params.stack, op),
        network: env.stacks.network(op),
      };
      const effects: Effect[] = id === 'stack.start' ? [...renderEffect(env, params.stack), service] : [service];
      return {
        effects,
        inputs: inputsOf(env, params.stack),
        inverse: { kind: 'service', stack: params.stack, state: id === 'stack.start' ? 'stopped' : 'running', file: null },
        data: { stack: params.stack },
        summary: `${id.slice(6)} stack ${params.stack}`,
      };
    },
    async apply(env, plan) {
      const stack = plan.data.stack as StackId;
      if (id === 'stack.start') return bringTo(env, stack, 'running');
      if (id === 'stack.stop') return bringTo(env, stack, 'stopped');
      return env.stacks.run(env.project, stack, 'restart');
    },
    verify(env, plan) {
      return probe(env, plan.data.stack as StackId, id === 'stack.stop' ? 'stopped' : 'running');
    },
    rollback: serviceRollback(),
  };
}

export const stackStart = serviceAction('stack.start', 'start a local stack from the kit templates (native backend: a supervised process)');
export const stackStop = serviceAction('stack.stop', 'stop a local stack; its data is kept');
export const stackRestart = serviceAction('stack.restart', 'restart a local stack on the same data');

const Autostart = z.strictObject({
  stack: z.enum(STACKS),
  enabled: z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]),
});
type AutostartParams = z.infer<typeof Autostart>;

/**
 * `stack.autostart` ("restart with the machine"): a class A edit of the rendered file
 * (`restart: unless-stopped` ↔ `"no"`), then a recreate of the stack when it runs. For the native
 * backend the machine is the server: at start it starts again the stacks whose policy is
 * unless-stopped and that were not stopped on purpose.
 */
export const stackAutostart: ActionSpec<AutostartParams> = {
  id: 'stack.autostart',
  class: 'B',
  title: 'restart a stack with the machine (restart: unless-stopped) or not ("no")',
  parameters: Autostart as unknown as z.ZodType<AutostartParams>,
  parameterHelp: [stackHelp, { name: 'enabled', type: 'true|false', required: true, description: 'unless-stopped (true) or "no" (false)' }],
  effectKinds: ['file', 'service'],
  inverseDescription: 'restore the rendered file to its exact prior bytes, then recreate the stack as it was',
  preconditions(env, params) {
    const list = base(env, params);
    if (params) {
      const want = params.enabled ? 'unless-stopped' : 'no';
      const now = restartPolicy(env.project, params.stack);
      list.push({
        name: 'change needed',
        ok: now !== want,
        reason: now === want ? `${params.stack} already has restart: ${now}` : `restart: ${now} → ${want}`,
      });
    }
    return list;
  },
  inputs: (env, params) => inputsOf(env, params.stack),
  plan(env, params) {
    const failed = this.preconditions(env, params).filter((p) => !p.ok);
    if (failed.length > 0) throw refuse(failed, this.id);
    const rel = renderedPath(params.stack);
    const existing = readProjectFile(env.project.path, rel);
    const before = existing ?? renderTemplate(params.stack, env.project);
    const edit = setKey(before, ['services', params.stack, 'restart'], params.enabled ? 'unless-stopped' : 'no', rel);
    const running = state(env, params.stack) === 'running';
    const effects: Effect[] = [
      {
        kind: 'file',
        path: rel,
        key: `services.${params.stack}.restart`,
        beforeSha256: existing === null ? null : sha256(existing),
        afterSha256: sha256(edit.text),
        diff: unifiedDiff(rel, existing, edit.text),
      },
    ];
    if (running)
      effects.push({
        kind: 'service',
        stack: params.stack,
        operation: 'recreate',
        argv: env.stacks.argv(env.project, params.stack, 'recreate'),
        network: env.stacks.network('recreate'),
      });
    return {
      effects,
      inputs: inputsOf(env, params.stack),
      inverse: {
        kind: 'service',
        stack: params.stack,
        state: running ? 'running' : 'stopped',
        file: {
          kind: 'restore-file',
          path: rel,
          snapshot: existing === null ? null : 'stack.yml',
          beforeSha256: existing === null ? null : sha256(existing),
          afterSha256: sha256(edit.text),
        },
      },
      data: { stack: params.stack, after: edit.text, policy: params.enabled ? 'unless-stopped' : 'no', running },
      summary: `restart: ${params.enabled ? 'unless-stopped' : '"no"'} for stack ${params.stack}`,
    };
  },
  async apply(env, plan, executionId) {
    const stack = plan.data.stack as StackId;
    const rel = renderedPath(stack);
    const before = readProjectFile(env.project.path, rel);
    if (before !== null) writeSnapshot(env.project.path, executionId, 'stack.yml', before);
    ensureRuntimeDir(env.project.path, 'stacks');
    writeProjectFile(env.project.path, rel, plan.data.after as string);
    const effects: ObservedEffect[] = [
      { kind: 'file', path: rel, beforeSha256: before === null ? null : sha256(before), afterSha256: fileState(env.project.path, rel) },
    ];
    if (plan.data.running) effects.push(...(await env.stacks.run(env.project, stack, 'recreate')));
    return effects;
  },
  async verify(env, plan) {
    const stack = plan.data.stack as StackId;
    const rel = renderedPath(stack);
    const text = readProjectFile(env.project.path, rel) ?? '';
    const policy = String((readYamlMapping(text, rel).services as Record<string, { restart?: unknown }>)[stack]?.restart);
    const checks: Verification['checks'] = [
      { name: 'restart policy reads back', ok: policy === plan.data.policy, detail: `restart: ${policy}` },
    ];
    if (plan.data.running) checks.push(...(await probe(env, stack, 'running')).checks);
    return { ok: checks.every((c) => c.ok), checks };
  },
  rollback: serviceRollback(),
};
