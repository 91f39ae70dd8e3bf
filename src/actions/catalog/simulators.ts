import { z } from 'zod';
import { keyEditAction } from './configEdit.js';

const LABEL = /^[a-z](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

/**
 * One entry of the `simulators:` block, in the shape of the specification (section 4.3):
 * `name`, `version`, `env`, `services`, `stubsDirectory`.
 */
export const SimulatorEntry = z.strictObject({
  name: z.string().regex(LABEL, 'a simulator name is a DNS label (lower-case letters, digits, -)'),
  version: z
    .string()
    .min(1)
    .max(40)
    .regex(/^[A-Za-z0-9._-]+$/, 'a version such as "15" (a major installed on the server)')
    .optional(),
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, 'an environment variable name'), z.string().max(4096)).optional(),
  services: z.array(z.string().regex(LABEL, 'a service name such as s3')).max(20).optional(),
  stubsDirectory: z
    .string()
    .min(1)
    .max(300)
    .refine((p) => !p.startsWith('/') && !p.split('/').includes('..'), 'stubsDirectory is a path inside the repository (relative, no ..)')
    .optional(),
});

const Params = z.strictObject({
  simulators: z
    .array(SimulatorEntry)
    .max(20)
    .refine((l) => new Set(l.map((s) => s.name)).size === l.length, 'each simulator name appears once'),
});

/** `simulators.compose`: sets the whole `simulators:` block of atelier.yaml. */
export const simulatorsCompose = keyEditAction<z.infer<typeof Params>>({
  id: 'simulators.compose',
  title: 'set the simulators: block of atelier.yaml',
  path: ['simulators'],
  parameters: Params,
  parameterHelp: [
    {
      name: 'simulators',
      type: 'JSON list',
      required: true,
      description:
        'for example [{"name":"postgres","env":{"POSTGRES_DB":"testdb"}},{"name":"wiremock","stubsDirectory":"./tests/mocks"}]; a version, when given, is one the server has installed (none: the newest)',
    },
  ],
  compute(current, { simulators }) {
    if (JSON.stringify(current ?? []) === JSON.stringify(simulators)) return 'the simulators: block already reads exactly so';
    return { value: simulators };
  },
  check(env, settings) {
    const r = z.array(SimulatorEntry).safeParse(settings.simulators ?? []);
    if (!r.success) throw new Error(`simulators: ${r.error.issues[0]?.message ?? 'invalid'}`);
    // What the server cannot start is refused now, not when a workshop of the project starts.
    r.data.forEach((s, i) => {
      try {
        env.checkSimulatorVersion({ type: s.name, name: s.name, version: s.version });
      } catch (err) {
        throw new Error(`simulators.${i}: ${(err as Error).message}`);
      }
    });
  },
  inverseDescription: 'restore atelier.yaml to its exact prior bytes',
});
