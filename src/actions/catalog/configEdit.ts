import { existsSync, lstatSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import { AtelierError } from '../../core/index.js';
import { unifiedDiff } from '../diff.js';
import { redact, scrubText, secretsOf, secretsOfYaml } from '../redact.js';
import {
  fileState,
  JOURNAL_FILE,
  PROJECT_FILE,
  readProjectFile,
  readSnapshot,
  removeProjectFile,
  sha256,
  writeProjectFile,
  writeSnapshot,
} from '../projectFiles.js';
import type { ActionEnv, ActionSpec, Inverse, ObservedEffect, ParameterHelp, PlannedChange, Precondition, Verification } from '../types.js';
import { canonical, getPlain, readYamlMapping, setKey } from '../yamlEdit.js';

/** A class A action: one targeted key of `atelier.yaml`, set to a value computed from its current one. */
export interface KeyEditDefinition<P> {
  id: string;
  title: string;
  /** The key it edits, such as ['egress', 'allow']. */
  path: string[];
  parameters: z.ZodType<P>;
  parameterHelp: ParameterHelp[];
  /** The new value from the current one; a string is the reason there is nothing to do (a false precondition). */
  compute(current: unknown, params: P): { value: unknown } | string;
  /** Checks the whole settings after the edit as workshops will read them; throws with what is wrong. */
  check?(env: ActionEnv, settings: Record<string, unknown>): void;
  inverseDescription: string;
}

function same(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

/** Preconditions every class A action shares: the project, its settings file and its journal. */
function basePreconditions(env: ActionEnv): { list: Precondition[]; settings: Record<string, unknown> | undefined } {
  const list: Precondition[] = [];
  const root = env.project.path;
  const dirOk = existsSync(root) && statSync(root).isDirectory();
  list.push({
    name: 'project directory present',
    ok: dirOk,
    reason: dirOk ? root : `${root} does not exist any more: register the project again`,
  });
  let settings: Record<string, unknown> | undefined;
  if (dirOk) {
    try {
      const text = readProjectFile(root);
      settings = text === null ? {} : readYamlMapping(text, PROJECT_FILE);
      list.push({
        name: `${PROJECT_FILE} readable`,
        ok: true,
        reason: text === null ? `${PROJECT_FILE} is absent: it will be created` : `${PROJECT_FILE} parses`,
      });
    } catch (err) {
      list.push({ name: `${PROJECT_FILE} readable`, ok: false, reason: (err as Error).message });
    }
    const journal = join(root, JOURNAL_FILE);
    let journalOk = true;
    try {
      journalOk = !existsSync(journal) || lstatSync(journal).isFile();
    } catch {
      journalOk = false;
    }
    list.push({
      name: 'journal writable',
      ok: journalOk,
      reason: journalOk ? JOURNAL_FILE : `${JOURNAL_FILE} is not a regular file: move it away`,
    });
  }
  return { list, settings };
}

/** Builds the catalog entry of a key edit: preconditions, plan (with diff), apply, verification and inverse. */
export function keyEditAction<P>(def: KeyEditDefinition<P>): ActionSpec<P> {
  const key = def.path.join('.');
  const compute = (settings: Record<string, unknown>, params: P): { value: unknown } | string =>
    def.compute(getPlain(settings, def.path), params);

  return {
    id: def.id,
    class: 'A',
    title: def.title,
    parameters: def.parameters,
    parameterHelp: def.parameterHelp,
    effectKinds: ['file'],
    inverseDescription: def.inverseDescription,

    preconditions(env, params) {
      const { list, settings } = basePreconditions(env);
      if (params !== undefined && settings !== undefined) {
        const r = compute(settings, params);
        list.push(
          typeof r === 'string'
            ? { name: 'change needed', ok: false, reason: r }
            : { name: 'change needed', ok: true, reason: `${key} will change` },
        );
      }
      return list;
    },

    inputs(env) {
      return { [PROJECT_FILE]: fileState(env.project.path) };
    },

    plan(env, params): PlannedChange {
      const failed = this.preconditions(env, params).filter((p) => !p.ok);
      if (failed.length > 0)
        throw new AtelierError(
          'PRECONDITION_FAILED',
          `${def.id} cannot be planned: ${failed.map((p) => `${p.name}: ${p.reason}`).join('; ')}`,
          {
            preconditions: failed,
          },
        );
      const before = readProjectFile(env.project.path);
      const settings = before === null ? {} : readYamlMapping(before, PROJECT_FILE);
      const r = compute(settings, params);
      if (typeof r === 'string') throw new AtelierError('PRECONDITION_FAILED', r);
      const edit = setKey(before ?? '', def.path, r.value, PROJECT_FILE);
      if (def.check) {
        try {
          def.check(env, readYamlMapping(edit.text, PROJECT_FILE));
        } catch (err) {
          throw new AtelierError('INVALID_ARGUMENT', (err as Error).message, { field: def.parameterHelp[0]?.name ?? key });
        }
      }
      const beforeSha256 = before === null ? null : sha256(before);
      const afterSha256 = sha256(edit.text);
      const inverse: Inverse = {
        kind: 'restore-file',
        path: PROJECT_FILE,
        snapshot: before === null ? null : PROJECT_FILE,
        beforeSha256,
        afterSha256,
      };
      return {
        // The diff hides what the parameters hide (env values), in the old text and the new.
        effects: [
          {
            kind: 'file',
            path: PROJECT_FILE,
            key,
            beforeSha256,
            afterSha256,
            diff: scrubText(
              unifiedDiff(PROJECT_FILE, before, edit.text),
              secretsOfYaml(edit.text, secretsOfYaml(before, secretsOf(params))),
            ),
          },
        ],
        inputs: { [PROJECT_FILE]: beforeSha256 ?? 'absent' },
        inverse,
        data: { after: edit.text, value: r.value },
        summary: `set ${key} in ${PROJECT_FILE}`,
      };
    },

    apply(env, plan, executionId): ObservedEffect[] {
      const root = env.project.path;
      const before = readProjectFile(root);
      if (before !== null) writeSnapshot(root, executionId, PROJECT_FILE, before);
      const after = plan.data.after as string;
      writeProjectFile(root, PROJECT_FILE, after);
      return [{ kind: 'file', path: PROJECT_FILE, beforeSha256: before === null ? null : sha256(before), afterSha256: fileState(root) }];
    },

    verify(env, plan): Verification {
      const checks: Verification['checks'] = [];
      const text = readProjectFile(env.project.path);
      const effect = plan.effects[0];
      const expectedSha = effect?.kind === 'file' ? effect.afterSha256 : '';
      checks.push({
        name: 'file holds the planned bytes',
        ok: text !== null && sha256(text) === expectedSha,
        detail: text === null ? `${PROJECT_FILE} is missing` : `sha256 ${sha256(text).slice(0, 12)}`,
      });
      try {
        const settings = readYamlMapping(text ?? '', PROJECT_FILE);
        const ok = same(getPlain(settings, def.path), plan.data.value);
        checks.push({ name: `${key} reads back`, ok, detail: JSON.stringify(redact(getPlain(settings, def.path))) });
        if (def.check) {
          try {
            def.check(env, settings);
            checks.push({ name: 'settings valid', ok: true, detail: 'workshops will accept this file' });
          } catch (err) {
            checks.push({ name: 'settings valid', ok: false, detail: (err as Error).message });
          }
        }
      } catch (err) {
        checks.push({ name: `${key} reads back`, ok: false, detail: (err as Error).message });
      }
      return { ok: checks.every((c) => c.ok), checks };
    },

    rollback(env, inverse) {
      if (inverse.kind !== 'restore-file') throw new AtelierError('UNSUPPORTED', 'this execution recorded no file to restore');
      const root = env.project.path;
      const now = fileState(root, inverse.path);
      const beforeState = inverse.beforeSha256 ?? 'absent';
      const effects: ObservedEffect[] = [];
      if (now !== beforeState) {
        if (now !== inverse.afterSha256)
          throw new AtelierError(
            'ROLLBACK_CONFLICT',
            `${inverse.path} was edited by someone else since this action was applied: its content is neither the applied one nor the one before. Nothing was changed; undo by hand or plan a new action`,
            { path: inverse.path, expected: inverse.afterSha256, found: now },
          );
        if (inverse.snapshot === null) removeProjectFile(root, inverse.path);
        else {
          const prior = readSnapshot(root, inverse.snapshot);
          if (sha256(prior) !== inverse.beforeSha256)
            throw new AtelierError(
              'ROLLBACK_CONFLICT',
              `the snapshot ${inverse.snapshot} does not match the journal: nothing was changed`,
              { path: inverse.snapshot },
            );
          writeProjectFile(root, inverse.path, prior);
        }
        effects.push({
          kind: 'file',
          path: inverse.path,
          beforeSha256: now === 'absent' ? null : now,
          afterSha256: fileState(root, inverse.path),
        });
      }
      const restored = fileState(root, inverse.path);
      const ok = restored === beforeState;
      return {
        effects,
        verification: {
          ok,
          checks: [
            {
              name: 'file holds the prior bytes',
              ok,
              detail:
                effects.length === 0
                  ? 'it already did: nothing to undo'
                  : beforeState === 'absent'
                    ? 'removed, as before'
                    : `sha256 ${restored.slice(0, 12)}`,
            },
          ],
        },
      };
    },
  };
}
