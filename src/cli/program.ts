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

type Register = (program: Command, cli: Cli) => void;

/**
 * The modules that add `atelier`'s commands, in the order `atelier --help` lists them, each with
 * the top-level names (and aliases) of the commands it adds (program.test.ts checks both against
 * what each one really adds).
 */
export const NOUNS: readonly { commands: readonly string[]; load(): Promise<Register> }[] = [
  { commands: ['server'], load: async () => (await import('./commands/server/index.js')).register },
  { commands: ['workshops', 'ws'], load: async () => (await import('./commands/workshops/index.js')).register },
  { commands: ['simulators', 'sims'], load: async () => (await import('./commands/simulators/index.js')).register },
  { commands: ['exec'], load: async () => (await import('./commands/exec/index.js')).register },
  {
    commands: ['ssh', 'run', 'attach', 'port-forward', 'config-ssh', 'code'],
    load: async () => {
      const { registerTerminalCommands } = await import('./commands/ssh/register.js');
      return (program, cli) => registerTerminalCommands(program, cli.ctx, cli.setExitCode);
    },
  },
  { commands: ['auth'], load: async () => (await import('./commands/auth/index.js')).register },
  { commands: ['context'], load: async () => (await import('./commands/context/index.js')).register },
  { commands: ['users'], load: async () => (await import('./commands/users/index.js')).register },
  { commands: ['tokens'], load: async () => (await import('./commands/tokens/index.js')).register },
  { commands: ['nodes'], load: async () => (await import('./commands/nodes/index.js')).register },
  { commands: ['approvals', 'approve'], load: async () => (await import('./commands/approvals/index.js')).register },
  { commands: ['secrets'], load: async () => (await import('./commands/secrets/index.js')).register },
  { commands: ['audit'], load: async () => (await import('./commands/audit/index.js')).register },
  { commands: ['projects'], load: async () => (await import('./commands/projects/index.js')).register },
  { commands: ['actions'], load: async () => (await import('./commands/actions/index.js')).register },
  { commands: ['mcp'], load: async () => (await import('./commands/mcp/index.js')).register },
  // `__complete` walks the whole tree: it is not listed, so it gets it.
  { commands: ['completion'], load: async () => (await import('./commands/completion/index.js')).register },
];

/**
 * The command tree; `exitCode()` is the code a finished command asked for. Given the command line
 * (`argv`), a command that starts with its noun (`atelier workshops list`) gets only that noun's
 * commands: building all of them was ~5 ms of CPU of every command's start (issue 20), and a
 * noun's commands, help and errors do not depend on the others. Anything else (`atelier --help`,
 * `help`, a global option first, a mistyped noun, `__complete`) gets the whole tree.
 */
export async function createProgram(
  config: Config,
  /** The CLI's version, or what reads it when a command needs it. */
  version: string | (() => string),
  argv?: readonly string[],
): Promise<{ program: Command; exitCode(): number }> {
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
    get version() {
      return typeof version === 'string' ? version : version();
    },
    ctx,
    render,
    Option,
    setExitCode: (code) => {
      exitCode = code;
    },
  };
  const first = argv?.[0];
  const own = first === undefined ? undefined : NOUNS.find((n) => n.commands.includes(first));
  const registers = await Promise.all((own ? [own] : NOUNS).map((n) => n.load()));
  for (const register of registers) register(program, cli);
  return { program, exitCode: () => exitCode };
}
