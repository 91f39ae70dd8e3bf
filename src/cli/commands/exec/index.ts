import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** `atelier exec …`: its commands, each loading its code only when it runs. */
export function register(program: Command, cli: Cli): void {
  program
    .command('exec <id> [command...]')
    .description('run a command in a workshop (by id or name): atelier exec ID|NAME -- CMD [ARGS...]; exits with its exit code')
    .option('--cwd <dir>', 'working directory (relative to /workspace)')
    .option('-e, --env <KEY=VALUE...>', 'environment variables', [])
    .option('-i, --interactive', "send this terminal's standard input (read to the end) to the command")
    .option('--timeout <seconds>', 'kill the command after this many seconds (exit code 124)')
    .action(async (id: string, command: string[], flags) => {
      const { execCommand } = await import('./run.js');
      cli.setExitCode(await execCommand(cli.ctx(), id, command, flags as { env: string[] }));
    });
}
