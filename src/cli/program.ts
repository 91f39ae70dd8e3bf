import { Command, Help, Option } from 'commander';
import type { Config } from '../core/index.js';
import type { Cli } from './cli.js';
import { createCommandContext } from './context.js';
import { render } from './output.js';

/**
 * The options of `atelier` itself. `--context` and `--output` are read by commander wherever they
 * stand (`atelier workshops list -o json`), so no command may give its own option one of their
 * flags: commander would take it for the global one (see program.test.ts, which walks every command).
 */
export const GLOBAL_OPTIONS = ['--context', '-o', '--output'] as const;

/**
 * `-V, --version` works alone (`atelier --version`, answered by main() before anything loads) and
 * is no option of the tree: as a global one commander took `simulators request … --version 9` for
 * it, printed the CLI's version and started nothing. Shown in the help all the same.
 */
export const VERSION_FLAGS = ['-V', '--version'] as const;

/** The whole command tree, with every noun registered; `exitCode()` is the code a finished command asked for. */
export async function createProgram(config: Config, version: string): Promise<{ program: Command; exitCode(): number }> {
  let exitCode = 0;
  // Shown in the help, never offered as the correction of an unknown option (that is what a `long` is for).
  const versionHelp = Object.assign(new Option(VERSION_FLAGS.join(', '), 'output the version number (given alone)'), { long: undefined });
  const program: Command = new Command('atelier')
    .description('Run AI coding agents in contained workshops, with a human in the loop.')
    .addOption(new Option('--context <name>', 'server context to use (default: ATELIER_CONTEXT, then the current context)'))
    .addOption(new Option('-o, --output <format>', 'output format').choices(['table', 'json', 'yaml']).default('table'))
    .configureHelp({
      visibleOptions: (cmd) => {
        const shown = new Help().visibleOptions(cmd);
        return cmd === program ? [versionHelp, ...shown] : shown;
      },
    })
    .showHelpAfterError()
    .exitOverride();

  const ctx = () => {
    const o = program.opts<{ context?: string; output: 'table' | 'json' | 'yaml' }>();
    return createCommandContext(config, o.output, o.context);
  };

  const cli: Cli = {
    config,
    version,
    ctx,
    render,
    Option,
    setExitCode: (code) => {
      exitCode = code;
    },
  };
  const nouns = await Promise.all([
    import('./commands/server/index.js'),
    import('./commands/workshops/index.js'),
    import('./commands/simulators/index.js'),
    import('./commands/exec/index.js'),
  ]);
  for (const noun of nouns) noun.register(program, cli);
  const { registerTerminalCommands } = await import('./commands/ssh/register.js');
  registerTerminalCommands(program, ctx, (code) => (exitCode = code));
  const more = await Promise.all([
    import('./commands/auth/index.js'),
    import('./commands/context/index.js'),
    import('./commands/users/index.js'),
    import('./commands/tokens/index.js'),
    import('./commands/nodes/index.js'),
    import('./commands/approvals/index.js'),
    import('./commands/secrets/index.js'),
    import('./commands/audit/index.js'),
    import('./commands/projects/index.js'),
    import('./commands/actions/index.js'),
    import('./commands/mcp/index.js'),
    import('./commands/completion/index.js'),
  ]);
  for (const noun of more) noun.register(program, cli);
  return { program, exitCode: () => exitCode };
}
