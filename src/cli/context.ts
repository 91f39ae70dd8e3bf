import type { Config } from '../core/index.js';
import { resolveTarget, type Target } from './client.js';
import type { OutputFormat } from './output.js';

/** What every command receives from main(): config, output format and the server to talk to. */
export interface CommandContext {
  config: Config;
  output: OutputFormat;
  /** `--context NAME` as given on the command line. */
  contextFlag: string | undefined;
  target(): Promise<Target>;
}

export function createCommandContext(config: Config, output: OutputFormat, contextFlag: string | undefined): CommandContext {
  let cached: Promise<Target> | undefined;
  return { config, output, contextFlag, target: () => (cached ??= resolveTarget(config, contextFlag)) };
}
