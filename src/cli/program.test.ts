import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Command, Option } from 'commander';
import { loadConfig } from '../core/index.js';
import type { Cli } from './cli.js';
import { render } from './output.js';
import { createProgram, GLOBAL_OPTIONS, NOUNS } from './program.js';

/** Every flag of a command's own options (`-o`, `--output`). */
const flagsOf = (cmd: Command): string[] => cmd.options.flatMap((o) => [o.short, o.long].filter((f): f is string => f !== undefined));

const pathOf = (cmd: Command): string => {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
};

describe('the command tree', () => {
  it('no command has an option with a flag of a command above it (commander would take it for that one)', async () => {
    const { program } = await createProgram(loadConfig(), '0.0.0');
    const collisions: string[] = [];
    let commands = 0;
    const walk = (cmd: Command, above: Map<string, string>): void => {
      commands++;
      for (const flag of flagsOf(cmd)) {
        const owner = above.get(flag);
        if (owner !== undefined) collisions.push(`\`${pathOf(cmd)}\` has ${flag}, an option of \`${owner}\``);
      }
      const mine = new Map(above);
      for (const flag of flagsOf(cmd)) mine.set(flag, pathOf(cmd));
      for (const sub of cmd.commands) walk(sub, mine);
    };
    walk(program, new Map());
    assert.deepEqual(collisions, []);
    // The walk saw the whole tree, and the global options it guards are really there.
    assert.ok(commands > 50, `only ${commands} commands walked`);
    assert.deepEqual(flagsOf(program).sort(), [...GLOBAL_OPTIONS].sort());
  });
});

describe('a command with only its noun registered', () => {
  /** Every command under `cmd`, with its help, by path. */
  const helps = (cmd: Command, out = new Map<string, string>()): Map<string, string> => {
    out.set(pathOf(cmd), cmd.helpInformation());
    for (const sub of cmd.commands) helps(sub, out);
    return out;
  };

  it('each noun module adds exactly the top-level commands NOUNS names, in the order of the whole tree', async () => {
    const { program } = await createProgram(loadConfig(), '0.0.0');
    // Registering runs no command: ctx() is never called.
    const cli: Cli = {
      config: loadConfig(),
      version: '0.0.0',
      ctx: () => assert.fail('no command runs here'),
      render,
      Option,
      setExitCode: () => undefined,
    };
    const listed: string[] = [];
    for (const noun of NOUNS) {
      const alone = new Command('atelier');
      (await noun.load())(alone, cli);
      const added = alone.commands.flatMap((c) => [c.name(), ...c.aliases()]).filter((n) => n !== '__complete');
      assert.deepEqual(added, [...noun.commands]);
      listed.push(...alone.commands.map((c) => c.name()));
    }
    assert.deepEqual(
      program.commands.map((c) => c.name()),
      listed,
    );
  });

  it('has the same commands, options and help as in the whole tree (so the same errors)', async () => {
    const whole = helps((await createProgram(loadConfig(), '0.0.0')).program);
    for (const noun of NOUNS)
      for (const name of noun.commands) {
        const { program } = await createProgram(loadConfig(), '0.0.0', [name, 'list']);
        const own = helps(program);
        // The root's own help lists only this noun: the whole tree answers `atelier --help`.
        own.delete('atelier');
        assert.ok(own.size > 0, `${name} registered nothing`);
        for (const [path, help] of own) assert.equal(help, whole.get(path), `the help of \`${path}\` with only ${name} registered`);
        const count = [...whole.keys()].filter((p) =>
          noun.commands.some((c) => p === `atelier ${c}` || p.startsWith(`atelier ${c} `)),
        ).length;
        assert.ok(own.size >= count, `${name}: ${own.size} commands, ${count} in the whole tree`);
      }
  });
});
