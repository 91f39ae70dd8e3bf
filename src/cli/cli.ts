import type { Option } from 'commander';
import type { Config } from '../core/index.js';
import type { CommandContext } from './context.js';
import type { render } from './output.js';

/** What main() hands each noun's `register(program, cli)`: the one place output and exit codes are decided. */
export interface Cli {
  config: Config;
  version: string;
  /** The command's context (output format, server), read from the global options when it runs. */
  ctx(): CommandContext;
  /** Prints a command's data as --output says. */
  render: typeof render;
  /** commander's Option class (commander is loaded only past `--version`). */
  Option: typeof Option;
  /** The exit code main() returns once the command is done. */
  setExitCode(code: number): void;
}
