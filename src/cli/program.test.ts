import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Command } from 'commander';
import { loadConfig } from '../core/index.js';
import { createProgram, GLOBAL_OPTIONS } from './program.js';

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
