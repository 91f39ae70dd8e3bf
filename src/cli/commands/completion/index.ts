import type { Command } from 'commander';
import type { Cli } from '../../cli.js';

/** How long `__complete` waits for the server's workshops before it answers without them. */
const SERVER_WAIT_MS = 1500;

/** `atelier completion bash|zsh|fish`, and the hidden `atelier __complete` its scripts call. */
export function register(program: Command, cli: Cli): void {
  program
    .command('completion')
    .description('print the shell completion script: bash, zsh or fish (see `atelier completion --help`)')
    .addArgument(program.createArgument('<shell>', 'the shell').choices(['bash', 'zsh', 'fish']))
    .addHelpText(
      'after',
      [
        '',
        'Install:',
        "  bash: echo 'source <(atelier completion bash)' >> ~/.bashrc",
        "  zsh:  echo 'source <(atelier completion zsh)' >> ~/.zshrc   (after compinit)",
        '  fish: atelier completion fish > ~/.config/fish/completions/atelier.fish',
      ].join('\n'),
    )
    .action(async (shell: 'bash' | 'zsh' | 'fish') => {
      const { completionScript } = await import('./scripts.js');
      process.stdout.write(completionScript(shell));
    });

  // Called by the scripts with the words typed so far; prints `word<TAB>description` lines.
  // Silent whatever happens (no server, a bad context): a completion must never print an error.
  program
    .command('__complete', { hidden: true })
    .argument('[words...]')
    .helpOption(false)
    .allowUnknownOption()
    .action(async (words: string[]) => {
      let text = '';
      try {
        const { complete } = await import('./complete.js');
        const candidates = await complete(program, words, {
          async workshops(context) {
            const { createCommandContext } = await import('../../context.js');
            const ctx = createCommandContext(cli.config, 'json', context);
            let timer: NodeJS.Timeout | undefined;
            const late = new Promise<[]>((resolve) => (timer = setTimeout(() => resolve([]), SERVER_WAIT_MS)));
            try {
              return await Promise.race([(async () => (await ctx.api()).call('listWorkshops'))().then((r) => r.items), late]);
            } catch {
              return [];
            } finally {
              clearTimeout(timer);
            }
          },
          async contexts() {
            const { readClientConfig } = await import('../../../core/index.js');
            return (await readClientConfig(cli.config.configDir)).contexts.map((c) => c.name);
          },
        });
        text = candidates.map((c) => (c.description ? `${c.value}\t${c.description}` : c.value)).join('\n');
      } catch {
        text = '';
      }
      // A request still open (a server that answers slowly) must not keep the shell waiting.
      await new Promise<void>((resolve) => process.stdout.write(text ? `${text}\n` : '', () => resolve()));
      process.exit(0);
    });
}
