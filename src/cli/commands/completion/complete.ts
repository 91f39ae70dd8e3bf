import type { Argument, Command, Option } from 'commander';

/** One completion: the word, and what it is (zsh and fish show it beside the word). */
export interface Candidate {
  value: string;
  description?: string;
}

/** What the completion may look up besides the command tree: the server's workshops, the CLI's contexts. */
export interface CompletionSources {
  /** Workshops of the server (the `--context` typed so far, else the current one); none when it cannot be reached. */
  workshops(context: string | undefined): Promise<Array<{ id: string; name: string; status: string }>>;
  contexts(): Promise<string[]>;
}

/**
 * The nouns whose `<id>` is their own kind of thing (an approval, a token); every other `<id>`
 * argument of the tree, and every `--workshop` option, names a workshop (see completion.test.ts,
 * which lists them all).
 */
const OWN_IDS = new Set(['approvals', 'approve', 'tokens']);

/** The command's path from the program down (`['workshops', 'status']`). */
function pathOf(cmd: Command): string[] {
  const names: string[] = [];
  for (let c: Command | null = cmd; c?.parent; c = c.parent) names.unshift(c.name());
  return names;
}

/** Whether this argument of `cmd` takes a workshop (an id or a name). */
export function takesWorkshop(cmd: Command, arg: Argument): boolean {
  return /^(id|workshop)$/.test(arg.name()) && !OWN_IDS.has(pathOf(cmd)[0] ?? '');
}

function visibleCommands(cmd: Command): Command[] {
  return cmd.commands.filter((c) => !(c as Command & { _hidden?: boolean })._hidden);
}

/** The options `cmd` accepts: its own, then those of the commands above it (the global ones). */
function optionsOf(cmd: Command): Option[] {
  const out: Option[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) out.push(...c.options.filter((o) => !o.hidden));
  return out;
}

function findOption(cmd: Command, flag: string): Option | undefined {
  return optionsOf(cmd).find((o) => o.long === flag || o.short === flag);
}

function oneLine(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').trim();
}

/**
 * bash splits `--output=json` at `=` (COMP_WORDBREAKS): `--output`, `=`, `json`. Joined back
 * here, so that every shell hands the same words.
 */
function joinEquals(words: string[]): string[] {
  const out: string[] = [];
  let glue = false;
  for (const w of words) {
    if (w === '=' && out.length > 0 && out[out.length - 1]!.startsWith('--')) {
      out[out.length - 1] += '=';
      glue = true;
    } else if (glue) {
      out[out.length - 1] += w;
      glue = false;
    } else out.push(w);
  }
  return out;
}

/**
 * The completions of the last of `words` (the words after `atelier`, the last one being typed,
 * possibly empty), read from the commander tree: sub-commands, options (with the global ones),
 * an option's choices, and workshop ids and names or context names where an argument takes one.
 * Empty when nothing is known: the shell then completes file names.
 */
export async function complete(program: Command, words: string[], sources: CompletionSources): Promise<Candidate[]> {
  const tokens = joinEquals(words.length > 0 ? words : ['']);
  const current = tokens[tokens.length - 1]!;
  let cmd = program;
  let positional = 0;
  let context: string | undefined;
  let valueOf: Option | undefined;
  for (let i = 0; i < tokens.length - 1; i++) {
    const t = tokens[i]!;
    if (t === '--') return []; // the command to run inside (exec, ssh, run): the shell's own
    if (t.startsWith('-') && t.length > 1) {
      const eq = t.indexOf('=');
      const opt = findOption(cmd, eq > 0 ? t.slice(0, eq) : t);
      if (opt?.long === '--context') context = eq > 0 ? t.slice(eq + 1) : tokens[i + 1];
      if (opt && (opt.required || opt.optional) && eq < 0) {
        if (i + 1 === tokens.length - 1) valueOf = opt;
        i++;
      }
      continue;
    }
    const sub = positional === 0 ? cmd.commands.find((c) => c.name() === t || c.aliases().includes(t)) : undefined;
    if (sub) cmd = sub;
    else positional++;
  }

  const prefixed = (prefix: string, all: Candidate[]): Candidate[] =>
    all.filter((c) => c.value.startsWith(current.slice(prefix.length))).map((c) => ({ ...c, value: prefix + c.value }));

  if (valueOf) return prefixed('', await optionValues(valueOf, context, sources));
  if (current.startsWith('--') && current.includes('=')) {
    const flag = current.slice(0, current.indexOf('='));
    const opt = findOption(cmd, flag);
    return opt ? prefixed(`${flag}=`, await optionValues(opt, context, sources)) : [];
  }
  if (current.startsWith('-')) {
    const seen = new Set<string>();
    const all: Candidate[] = [];
    for (const o of optionsOf(cmd)) {
      if (o.long && !seen.has(o.long)) {
        seen.add(o.long);
        all.push({ value: o.long, description: oneLine(o.description) });
      }
    }
    all.push({ value: '--help', description: 'display help for command' });
    return prefixed('', all);
  }
  const subs = positional === 0 ? visibleCommands(cmd) : [];
  if (subs.length > 0)
    return prefixed(
      '',
      subs.map((c) => ({ value: c.name(), description: oneLine(c.description()) })),
    );
  const args = cmd.registeredArguments;
  const last = args[args.length - 1];
  const arg = args[positional] ?? (last?.variadic ? last : undefined);
  if (!arg) return [];
  if (arg.argChoices)
    return prefixed(
      '',
      arg.argChoices.map((value) => ({ value })),
    );
  if (takesWorkshop(cmd, arg)) return prefixed('', workshopCandidates(await sources.workshops(context)));
  if (pathOf(cmd)[0] === 'context' && arg.name() === 'name')
    return prefixed(
      '',
      (await sources.contexts()).map((value) => ({ value })),
    );
  return [];
}

async function optionValues(opt: Option, context: string | undefined, sources: CompletionSources): Promise<Candidate[]> {
  if (opt.argChoices) return opt.argChoices.map((value) => ({ value }));
  if (opt.attributeName() === 'workshop') return workshopCandidates(await sources.workshops(context));
  if (opt.attributeName() === 'context') return (await sources.contexts()).map((value) => ({ value }));
  return [];
}

function workshopCandidates(items: Array<{ id: string; name: string; status: string }>): Candidate[] {
  const out: Candidate[] = [];
  for (const w of items) {
    out.push({ value: w.id, description: oneLine(`${w.name} (${w.status})`) });
    // A name with a space or a quote would need quoting: offered by its id only.
    if (/^[A-Za-z0-9._-]+$/.test(w.name) && w.name !== w.id) out.push({ value: w.name, description: oneLine(`${w.id} (${w.status})`) });
  }
  return out;
}
