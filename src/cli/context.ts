import type { Config } from '../core/index.js';
import type { AtelierClient } from '../sdk/index.js';
import { resolveTarget, sdkFor, type Target } from './client.js';
import type { OutputFormat } from './output.js';

/** What every command receives from main(): config, output format and the server to talk to. */
export interface CommandContext {
  config: Config;
  output: OutputFormat;
  /** `--context NAME` as given on the command line. */
  contextFlag: string | undefined;
  target(): Promise<Target>;
  /** The SDK client for that server. */
  api(): Promise<AtelierClient>;
}

export function createCommandContext(config: Config, output: OutputFormat, contextFlag: string | undefined): CommandContext {
  let cached: Promise<Target> | undefined;
  const target = (): Promise<Target> => (cached ??= resolveTarget(config, contextFlag));
  return { config, output, contextFlag, target, api: async () => sdkFor(await target()) };
}
