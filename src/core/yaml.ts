import type * as YamlModule from 'yaml';

type Yaml = typeof YamlModule;

/** Loads the `yaml` library lazily (it costs ~50 ms at start-up), bundled or not. */
export async function loadYaml(): Promise<Yaml> {
  // yaml is CommonJS: in the CLI bundle its functions are on `default`; unbundled, also on the namespace.
  const m = (await import('yaml')) as Yaml & { default?: Yaml };
  return m.default ?? m;
}
