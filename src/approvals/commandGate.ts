import { createHash } from 'node:crypto';

/**
 * Command gating (atelier.yaml `approvals.commands`) on what runs, not on how it is spelled.
 *
 * An exec's argv is read the way the kernel and a shell would run it: a shell's `-c` script (or
 * its script on stdin) is parsed into its simple commands (after `;`, `&&`, `||`, `|`, `&`, in
 * subshells, `{ …; }`, `$(…)`, backquotes, `<(…)`, `if`/`while`/`for`/`case` bodies, `eval`
 * and `trap` strings), quotes and backslashes are removed, leading assignments dropped, common
 * wrappers stripped (`env`, `command`, `builtin`, `exec`, `nice`, `nohup`, `setsid`, `time`,
 * `timeout`, `stdbuf`, `ionice`, `chrt`, `taskset`, `flock`, `xargs`, `sudo`, `doas`,
 * `busybox`, `find -exec`), the program taken by its base name, git's global options removed
 * (`-C`, `-c`, `--git-dir`, `--no-pager`, …, and `-c alias.X=…` aliases followed), combined short
 * flags split (`-rf` = `-r -f`) and rm's long flags mapped to short ones.
 *
 * Every simple command of a script is checked, whether or not it would run (`false && git push`
 * is gated too). When the program cannot be known from the text (a variable or a substitution
 * as the program, `eval` of an expansion, a shell running a script file, `source`, a git
 * subcommand that is not one of git's own, so an alias or an extension), the command is gated
 * by the first pattern: the gate cannot prove it is not one of them.
 */

/** One pattern's match, or an exec the gate cannot read. */
export interface CommandGateMatch {
  /** The atelier.yaml pattern (for an uncertain command: the first one). */
  pattern: string;
  /** The command, as normalised, that matched (or what could not be read). */
  command: string;
  /** Set when the gate could not tell what runs: why. */
  uncertain?: string;
}

/** A word of a script: its text once quotes are removed, and whether an expansion makes it unknowable. */
interface Word {
  text: string;
  dynamic: boolean;
}

type Token = { kind: 'word'; word: Word } | { kind: 'op'; op: string };

/** Commands a script or an argv runs, and what could not be read. */
interface Found {
  commands: string[][];
  /** What could not be read; `program`: only patterns of that program are concerned. */
  uncertain: { reason: string; program?: string }[];
}

const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh', 'ash', 'ksh', 'mksh', 'busybox-sh', 'rbash', 'posh', 'yash', 'fish']);
const RESERVED = new Set([
  'if',
  'then',
  'else',
  'elif',
  'fi',
  'do',
  'done',
  'while',
  'until',
  '!',
  '{',
  '}',
  'in',
  'esac',
  'function',
  'select',
  'coproc',
]);
/** Variables that make a shell, git or the dynamic loader run code of their choosing. */
const DANGEROUS_ENV =
  /^(BASH_ENV|ENV|BASH_FUNC_.*|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|LD_.*|GIT_.*|PAGER|EDITOR|VISUAL|NODE_OPTIONS|PERL5OPT|PYTHONSTARTUP)$/;
/** Directories of system programs: a path elsewhere is a program (or script) the gate cannot read. */
const SYSTEM_DIRS = new Set(['/usr/bin', '/bin', '/usr/sbin', '/sbin', '/usr/local/bin', '/usr/lib/git-core', '/usr/libexec/git-core']);
/** git `-c` keys that cannot make git run a program (compared in lower case; `*`: a prefix). */
const GIT_SAFE_CONFIG = ['user.name', 'user.email', 'color.*', 'core.quotepath', 'advice.*', 'init.defaultbranch', 'safe.directory'];
/** Interpreters whose inline program (`-e`/`-c` …) can run anything. */
const INLINE_PROGRAM: Record<string, string[]> = {
  perl: ['-e', '-E'],
  python: ['-c'],
  node: ['-e', '--eval', '-p', '--print'],
  nodejs: ['-e', '--eval', '-p', '--print'],
  ruby: ['-e'],
  php: ['-r'],
  lua: ['-e'],
  bun: ['-e', '--eval', '-p', '--print'],
  deno: ['eval'],
};
const AWKS = new Set(['awk', 'gawk', 'mawk', 'nawk', 'busybox-awk']);
/** Git's own commands (porcelain and the usual plumbing): any other subcommand is an alias or an extension. */
const GIT_COMMANDS = new Set(
  (
    'add am annotate apply archive bisect blame branch bundle cat-file check-attr check-ignore check-mailmap check-ref-format ' +
    'checkout checkout-index cherry cherry-pick citool clean clone column commit commit-graph commit-tree config count-objects ' +
    'credential describe diff diff-files diff-index diff-tree difftool fast-export fast-import fetch fetch-pack filter-branch ' +
    'fmt-merge-msg for-each-ref for-each-repo format-patch fsck gc get-tar-commit-id grep gui hash-object help hook http-backend ' +
    'index-pack init instaweb interpret-trailers log ls-files ls-remote ls-tree mailinfo mailsplit maintenance merge merge-base ' +
    'merge-file merge-index merge-tree mergetool mktag mktree multi-pack-index mv name-rev notes pack-objects pack-redundant ' +
    'pack-refs patch-id prune prune-packed pull push range-diff read-tree rebase receive-pack reflog remote repack replace ' +
    'request-pull rerere reset restore rev-list rev-parse revert rm send-email send-pack shortlog show show-branch show-index ' +
    'show-ref sparse-checkout stage stash status stripspace submodule switch symbolic-ref tag unpack-file unpack-objects ' +
    'update-index update-ref update-server-info upload-archive upload-pack var verify-commit verify-pack verify-tag version ' +
    'whatchanged worktree write-tree'
  ).split(' '),
);
/** Git global options that take a value in the next argument (or after `=`). */
const GIT_VALUE_OPTIONS = new Set(['-C', '-c', '--git-dir', '--work-tree', '--namespace', '--super-prefix', '--config-env']);
/** Long flags mapped to their short spelling, per program. */
const LONG_FLAGS: Record<string, Record<string, string>> = {
  rm: { '--recursive': '-r', '-R': '-r', '--force': '-f', '--dir': '-d', '--verbose': '-v', '--interactive': '-i' },
  'git push': { '--force': '-f', '--delete': '-d', '--all': '--all', '--tags': '--tags', '--mirror': '--mirror' },
  'git clean': { '--force': '-f', '--dry-run': '-n', '--quiet': '-q' },
};
/** How deep `sh -c "sh -c '…'"`, `$(…)` and `eval` may nest before the gate stops reading (and gates). */
const MAX_DEPTH = 16;

// --- Shell reading --------------------------------------------------------------------------

/** A small POSIX shell lexer: quotes, escapes, operators, comments, here-documents, substitutions. */
class Lexer {
  private i = 0;
  /** Here-documents announced on the current line: read after its newline. */
  private heredocs: { delimiter: string; strip: boolean }[] = [];
  /** Scripts found in `$(…)`, backquotes and `<(…)`/`>(…)` (their commands run too). */
  readonly substitutions: string[] = [];
  /** What the lexer could not read (too deep, a `case` inside a substitution). */
  readonly doubts: string[] = [];

  constructor(
    private readonly s: string,
    private readonly depth = 0,
  ) {}

  /** A substitution's script: a `case` in it may end it early at a pattern's `)`, so it is not trusted. */
  private substitution(inner: string): void {
    if (/(^|[\s;&|(`])case[\s]/.test(inner)) this.doubts.push('a case inside a substitution');
    this.substitutions.push(inner);
  }

  tokens(): Token[] {
    const out: Token[] = [];
    for (;;) {
      const t = this.next();
      if (!t) return out;
      out.push(t);
    }
  }

  private next(): Token | undefined {
    const s = this.s;
    for (;;) {
      while (this.i < s.length && (s[this.i] === ' ' || s[this.i] === '\t')) this.i++;
      if (s.startsWith('\\\n', this.i)) {
        this.i += 2;
        continue;
      }
      if (s[this.i] === '#') {
        while (this.i < s.length && s[this.i] !== '\n') this.i++;
        continue;
      }
      break;
    }
    if (this.i >= s.length) return undefined;
    const c = s[this.i]!;
    if (c === '\n') {
      this.i++;
      this.readHeredocs();
      return { kind: 'op', op: '\n' };
    }
    for (const op of ['&&', '||', ';;&', ';;', ';&', '|&', '<<-', '<<<', '<<', '>>', '&>>', '&>', '<&', '>&', '<>', '>|']) {
      if (s.startsWith(op, this.i)) {
        this.i += op.length;
        if (op === '<<' || op === '<<-') this.announceHeredoc(op === '<<-');
        return { kind: 'op', op };
      }
    }
    if ((c === '<' || c === '>') && s[this.i + 1] === '(') {
      this.i += 2;
      this.substitution(this.until(')'));
      return { kind: 'word', word: { text: '/dev/fd/63', dynamic: true } };
    }
    if (';&|()<>'.includes(c)) {
      this.i++;
      return { kind: 'op', op: c };
    }
    const word = this.word();
    // `2>&1`: the 2 is the redirection's descriptor, not an argument.
    if (/^\d+$/.test(word.text) && !word.dynamic && (s[this.i] === '<' || s[this.i] === '>')) return { kind: 'op', op: 'io' };
    return { kind: 'word', word };
  }

  /** Reads up to the matching closing bracket (quotes and nesting respected); returns the inside. */
  private until(close: ')' | '}'): string {
    const s = this.s;
    const open = close === ')' ? '(' : '{';
    const start = this.i;
    let depth = 1;
    while (this.i < s.length) {
      const c = s[this.i]!;
      if (c === '\\') this.i += 2;
      else if (c === "'") {
        const end = s.indexOf("'", this.i + 1);
        this.i = end < 0 ? s.length : end + 1;
      } else if (c === '"') {
        this.i++;
        while (this.i < s.length && s[this.i] !== '"') this.i += s[this.i] === '\\' ? 2 : 1;
        this.i++;
      } else if (c === open) {
        depth++;
        this.i++;
      } else if (c === close) {
        depth--;
        this.i++;
        if (depth === 0) return s.slice(start, this.i - 1);
      } else this.i++;
    }
    return s.slice(start);
  }

  /** `$…` at the cursor: a substitution's script is kept; the word becomes dynamic. */
  private dollar(): void {
    const s = this.s;
    this.i++;
    if (s.startsWith('((', this.i)) {
      this.i += 2;
      this.until(')');
      if (s[this.i] === ')') this.i++;
    } else if (s[this.i] === '(') {
      this.i++;
      this.substitution(this.until(')'));
    } else if (s[this.i] === '{') {
      this.i++;
      const inner = this.until('}');
      // ${x:-$(cmd)} and friends run code too.
      if (this.depth >= MAX_DEPTH) {
        this.doubts.push('expansions nested too deeply to read');
        return;
      }
      const sub = new Lexer(inner, this.depth + 1);
      sub.tokens();
      this.substitutions.push(...sub.substitutions);
      this.doubts.push(...sub.doubts);
    } else if (s[this.i] === "'") {
      // $'…' (ANSI-C quoting): read as a single-quoted string with escapes; dynamic enough.
      this.i++;
      while (this.i < s.length && s[this.i] !== "'") this.i += s[this.i] === '\\' ? 2 : 1;
      this.i++;
    } else {
      while (this.i < s.length && /[A-Za-z0-9_@*#?$!-]/.test(s[this.i]!)) {
        const special = !/[A-Za-z0-9_]/.test(s[this.i]!);
        this.i++;
        if (special) break;
      }
    }
  }

  private backquote(): void {
    const s = this.s;
    this.i++;
    let inner = '';
    while (this.i < s.length && s[this.i] !== '`') {
      if (s[this.i] === '\\' && this.i + 1 < s.length) {
        inner += s[this.i + 1];
        this.i += 2;
      } else inner += s[this.i++];
    }
    this.i++;
    this.substitution(inner);
  }

  private word(): Word {
    const s = this.s;
    let text = '';
    let dynamic = false;
    while (this.i < s.length) {
      const c = s[this.i]!;
      if (' \t\n;&|()<>'.includes(c)) break;
      if (c === '\\') {
        if (s[this.i + 1] === '\n') this.i += 2;
        else {
          text += s[this.i + 1] ?? '';
          this.i += 2;
        }
      } else if (c === "'") {
        const end = s.indexOf("'", this.i + 1);
        text += s.slice(this.i + 1, end < 0 ? s.length : end);
        this.i = end < 0 ? s.length : end + 1;
      } else if (c === '"') {
        this.i++;
        while (this.i < s.length && s[this.i] !== '"') {
          const d = s[this.i]!;
          if (d === '\\' && '$`"\\\n'.includes(s[this.i + 1] ?? '')) {
            if (s[this.i + 1] !== '\n') text += s[this.i + 1];
            this.i += 2;
          } else if (d === '$' && /[A-Za-z_{(@*#?$!0-9-]/.test(s[this.i + 1] ?? '')) {
            dynamic = true;
            this.dollar();
          } else if (d === '`') {
            dynamic = true;
            this.backquote();
          } else {
            text += d;
            this.i++;
          }
        }
        this.i++;
      } else if (c === '$' && /[A-Za-z_{('@*#?$!0-9-]/.test(s[this.i + 1] ?? '')) {
        dynamic = true;
        this.dollar();
      } else if (c === '`') {
        dynamic = true;
        this.backquote();
      } else {
        // Globs and brace expansion make the word's final text unknowable.
        if ('*?['.includes(c) || (c === '{' && /^\{[^\s}]*(,|\.\.)[^\s}]*\}/.test(s.slice(this.i)))) dynamic = true;
        if (c === '~' && text === '') dynamic = true;
        text += c;
        this.i++;
      }
    }
    return { text, dynamic };
  }

  /** The delimiter word after `<<`/`<<-` (read here, not through next(), which would recurse on `<<-<<-…`). */
  private announceHeredoc(strip: boolean): void {
    while (this.i < this.s.length && (this.s[this.i] === ' ' || this.s[this.i] === '\t')) this.i++;
    const c = this.s[this.i];
    if (c === undefined || ' \t\n;&|()<>'.includes(c)) return;
    this.heredocs.push({ delimiter: this.word().text, strip });
  }

  private readHeredocs(): void {
    for (const h of this.heredocs) {
      while (this.i < this.s.length) {
        const nl = this.s.indexOf('\n', this.i);
        const line = this.s.slice(this.i, nl < 0 ? this.s.length : nl);
        this.i = nl < 0 ? this.s.length : nl + 1;
        if ((h.strip ? line.replace(/^\t+/, '') : line) === h.delimiter) break;
      }
    }
    this.heredocs = [];
  }
}

const REDIRECTS = new Set(['<', '>', '>>', '<>', '>|', '<&', '>&', '&>', '&>>', '<<', '<<-', '<<<']);
const SEPARATORS = new Set(['\n', ';', '&', '&&', '||', '|', '|&', '(', ')', ';;', ';&', ';;&']);

/** The simple commands of a shell script (each an argv of words), and what could not be read. */
function readScript(script: string, depth: number, found: Found): void {
  if (depth > MAX_DEPTH) {
    found.uncertain.push({ reason: 'commands nested too deeply to read' });
    return;
  }
  const lexer = new Lexer(script, depth);
  const tokens = lexer.tokens();
  for (const reason of lexer.doubts) found.uncertain.push({ reason });
  let current: Word[] = [];
  const flush = (): void => {
    if (current.length > 0) commandOf(current, depth, found);
    current = [];
  };
  // In `case WORD in PATTERN) …`: patterns are not commands.
  let caseState: 'none' | 'word' | 'pattern' = 'none';
  for (let k = 0; k < tokens.length; k++) {
    const t = tokens[k]!;
    if (t.kind === 'op') {
      if (t.op === 'io') continue;
      if (REDIRECTS.has(t.op)) {
        // The redirection's target is not an argument.
        if (tokens[k + 1]?.kind === 'word') k++;
        continue;
      }
      if (caseState === 'pattern' && t.op === ')') {
        caseState = 'none';
        current = [];
        continue;
      }
      if (t.op === ';;' || t.op === ';&' || t.op === ';;&') {
        flush();
        caseState = 'pattern';
        continue;
      }
      if (SEPARATORS.has(t.op)) flush();
      continue;
    }
    const w = t.word;
    if (caseState === 'word') {
      if (w.text === 'in' && !w.dynamic) caseState = 'pattern';
      continue;
    }
    if (caseState === 'pattern') {
      if (w.text === 'esac') caseState = 'none';
      continue;
    }
    if (current.length === 0 && !w.dynamic) {
      // Reserved words in command position introduce the command that follows.
      if (RESERVED.has(w.text)) {
        if (w.text === 'function' && tokens[k + 1]?.kind === 'word') k++;
        // `coproc NAME { …; }` / `coproc NAME ( … )`: NAME is not a command.
        if (w.text === 'coproc' && tokens[k + 1]?.kind === 'word') {
          const after = tokens[k + 2];
          if ((after?.kind === 'word' && after.word.text === '{') || (after?.kind === 'op' && after.op === '(')) k++;
        }
        continue;
      }
      if (w.text === 'case') {
        caseState = 'word';
        continue;
      }
      if (w.text === 'for' || w.text === 'select') {
        // `for NAME in WORDS; do …`: the words are not a command.
        while (k + 1 < tokens.length && !(tokens[k + 1]!.kind === 'op' && [';', '\n'].includes((tokens[k + 1] as { op: string }).op))) {
          const n = tokens[k + 1]!;
          if (n.kind === 'word' && n.word.text === 'do') break;
          k++;
        }
        continue;
      }
      if (w.text === '[[') {
        while (k + 1 < tokens.length && !(tokens[k + 1]!.kind === 'word' && (tokens[k + 1] as { word: Word }).word.text === ']]')) k++;
        k++;
        continue;
      }
      // A function definition `name() { …; }`: its body is read like any other commands.
      if (tokens[k + 1]?.kind === 'op' && (tokens[k + 1] as { op: string }).op === '(' && tokens[k + 2]?.kind === 'op') {
        k += 2;
        continue;
      }
    }
    current.push(w);
  }
  flush();
  // A here-document's body is text, unless a shell reads it (`sh <<EOF`): that shell is then
  // reported as reading commands from its input (uncertain), never read as plain text.
  for (const sub of lexer.substitutions) readScript(sub, depth + 1, found);
}

// --- Commands --------------------------------------------------------------------------------

function base(program: string): string {
  const b = program.slice(program.lastIndexOf('/') + 1);
  return b === '' ? program : b;
}

/** A variable that makes the program run code of its choosing: the gate cannot tell what runs. */
function dangerousEnv(name: string, found: Found): void {
  if (DANGEROUS_ENV.test(name)) found.uncertain.push({ reason: `${name} is set, which can make the program run another command` });
}

/** Splits a string on blanks (for `env -S`, `xargs`-like strings): no shell rules. */
function splitBlanks(s: string): string[] {
  return s.split(/\s+/).filter(Boolean);
}

/** Skips a wrapper's options; `withValue`: those that take the next argument. Returns the index of the wrapped program. */
function skipOptions(argv: string[], from: number, withValue: Set<string>): number {
  let i = from;
  while (i < argv.length) {
    const a = argv[i]!;
    if (a === '--') return i + 1;
    if (!a.startsWith('-') || a === '-') return i;
    const name = a.includes('=') ? a.slice(0, a.indexOf('=')) : a;
    if (withValue.has(name) && !a.includes('=')) i += 2;
    else if (/^-[A-Za-z]/.test(a) && a.length > 2 && withValue.has(a.slice(0, 2))) i += 1;
    else i += 1;
  }
  return i;
}

/**
 * Records one simple command (words as read from a script or an argv). Returns true when it is
 * a shell reading its script from stdin (so that a here-document is read as code).
 */
function commandOf(words: Word[], depth: number, found: Found): boolean {
  // Leading assignments (FOO=bar cmd) are not the program.
  let i = 0;
  while (i < words.length && /^[A-Za-z_][A-Za-z0-9_]*\+?=/.test(words[i]!.text) && !words[i]!.text.startsWith('=')) {
    dangerousEnv(words[i]!.text.slice(0, words[i]!.text.search(/\+?=/)), found);
    i++;
  }
  const rest = words.slice(i);
  if (rest.length === 0) return false;
  if (rest[0]!.dynamic) {
    found.uncertain.push({ reason: `the program is an expansion (${rest[0]!.text || '$…'})` });
    return false;
  }
  return argvOf(
    rest.map((w) => w.text),
    depth,
    found,
    rest.map((w) => w.dynamic),
  );
}

/**
 * Strips wrappers from an argv, then records what runs: a shell's script is read, git is
 * normalised. `dynamic[i]` says argument i is an expansion (unknown text).
 */
function argvOf(argv: string[], depth: number, found: Found, dynamic: boolean[] = [], stdin?: string): boolean {
  if (depth > MAX_DEPTH) {
    found.uncertain.push({ reason: 'commands nested too deeply to read' });
    return false;
  }
  let a = argv;
  let dyn = dynamic;
  const drop = (n: number): void => {
    a = a.slice(n);
    dyn = dyn.slice(n);
  };
  const readAsScript = (script: string): false => {
    readScript(script, depth + 1, found);
    return false;
  };
  for (let guard = 0; guard < 64 && a.length > 0; guard++) {
    if (dyn[0]) {
      found.uncertain.push({ reason: `the program is an expansion (${a[0] || '$…'})` });
      return false;
    }
    const path = a[0]!;
    if (path.includes('/') && !SYSTEM_DIRS.has(path.slice(0, path.lastIndexOf('/')))) {
      found.uncertain.push({ reason: `${path} is a program outside the system's directories, which the gate cannot read` });
      return false;
    }
    const prog = base(path);
    switch (prog) {
      case 'coproc':
        drop(1);
        continue;
      case 'export':
      case 'declare':
      case 'typeset':
      case 'local':
      case 'readonly':
        // `export GIT_SSH_COMMAND=…` sets what later commands see.
        for (const x of a.slice(1)) if (!x.startsWith('-')) dangerousEnv(x.split('=')[0]!, found);
        found.commands.push(a);
        return false;
      case 'script': {
        // script [opts] -c CMD [file]: CMD is run by a shell.
        for (let i = 1; i < a.length; i++) {
          const x = a[i]!;
          if (x === '-c' || x === '--command') return readAsScript(a[i + 1] ?? '');
          if (x.startsWith('--command=')) return readAsScript(x.slice(10));
          if (/^-[A-Za-z]*c$/.test(x)) return readAsScript(a[i + 1] ?? '');
          if (/^-[A-Za-z]*c./.test(x)) return readAsScript(x.slice(x.indexOf('c') + 1));
        }
        found.commands.push(a);
        return false;
      }
      case 'su':
      case 'runuser': {
        // su/runuser [opts] [-c CMD] [user]: CMD is run by the user's shell; no -c: a login shell (or runuser -u USER CMD…).
        for (let i = 1; i < a.length; i++) {
          const x = a[i]!;
          if (x === '-c' || x === '--command' || x === '-C' || x === '--session-command') return readAsScript(a[i + 1] ?? '');
          if (x.startsWith('--command=') || x.startsWith('--session-command=')) return readAsScript(x.slice(x.indexOf('=') + 1));
          if ((x === '-u' || x === '--user') && prog === 'runuser') {
            const j = a[i + 2] === '--' ? i + 3 : i + 2;
            if (j < a.length) return argvOf(a.slice(j), depth + 1, found, dyn.slice(j));
          }
        }
        found.uncertain.push({ reason: `${prog} runs a shell the gate cannot read` });
        return false;
      }
      case 'watch': {
        // watch [opts] CMD…: the words are joined and run by sh -c (with -x/--exec: run as an argv).
        let i = 1;
        let execArgv = false;
        while (i < a.length && a[i]!.startsWith('-')) {
          const x = a[i]!;
          if (x === '--') {
            i++;
            break;
          }
          if (x === '-x' || x === '--exec') execArgv = true;
          if (['-n', '--interval', '-q', '--equexit'].includes(x)) i++;
          i++;
        }
        if (i >= a.length) return false;
        if (execArgv) return argvOf(a.slice(i), depth + 1, found, dyn.slice(i));
        readScript(a.slice(i).join(' '), depth + 1, found);
        return false;
      }
      case 'env': {
        let i = 1;
        while (i < a.length) {
          const x = a[i]!;
          if (x === '--') {
            i++;
            break;
          }
          if (x === '-S' || x === '--split-string' || x.startsWith('--split-string=') || (x.startsWith('-S') && x.length > 2)) {
            const str = x === '-S' || x === '--split-string' ? (a[i + 1] ?? '') : x.startsWith('-S') ? x.slice(2) : x.slice(15);
            const after = x === '-S' || x === '--split-string' ? i + 2 : i + 1;
            return argvOf([...splitBlanks(str), ...a.slice(after)], depth + 1, found);
          }
          if (['-u', '--unset', '-C', '--chdir'].includes(x)) i += 2;
          else if (x.startsWith('-')) i++;
          else break;
        }
        while (i < a.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(a[i]!)) {
          dangerousEnv(a[i]!.slice(0, a[i]!.indexOf('=')), found);
          i++;
        }
        if (i >= a.length) return false;
        drop(i);
        continue;
      }
      case 'command':
      case 'builtin':
      case 'nohup':
      case 'exec':
      case 'time':
      case 'sudo':
      case 'doas':
      case 'setsid':
      case 'stdbuf':
      case 'ionice':
      case 'nice':
      case 'chrt':
      case 'taskset':
      case 'unbuffer':
      case 'catchsegv':
      case 'chronic':
      case 'ifne': {
        const withValue: Record<string, string[]> = {
          exec: ['-a'],
          time: ['-f', '--format', '-o', '--output'],
          sudo: [
            '-u',
            '--user',
            '-g',
            '--group',
            '-C',
            '--close-from',
            '-D',
            '--chdir',
            '-h',
            '--host',
            '-p',
            '--prompt',
            '-r',
            '--role',
            '-t',
            '--type',
            '-U',
            '--other-user',
            '-T',
            '--command-timeout',
          ],
          doas: ['-u', '-C'],
          stdbuf: ['-i', '-o', '-e', '--input', '--output', '--error'],
          ionice: ['-c', '--class', '-n', '--classdata', '-p', '--pid', '-P', '--pgid', '-u', '--uid'],
          nice: ['-n', '--adjustment'],
        };
        let i = skipOptions(a, 1, new Set(withValue[prog] ?? []));
        // nice -5 cmd, chrt [opts] PRIO cmd, taskset [opts] MASK cmd.
        if (prog === 'chrt' || prog === 'taskset') i += 1;
        if (prog === 'nice' && /^-\d+$/.test(a[1] ?? '')) i = Math.max(i, 2);
        if (i >= a.length) return false;
        drop(i);
        continue;
      }
      case 'timeout': {
        let i = skipOptions(a, 1, new Set(['-s', '--signal', '-k', '--kill-after']));
        i += 1; // the duration
        if (i >= a.length) return false;
        drop(i);
        continue;
      }
      case 'flock': {
        let i = skipOptions(a, 1, new Set(['-w', '--timeout', '-E', '--conflict-exit-code']));
        i += 1; // the lock file
        if (a[i] === '-c' || a[i] === '--command') {
          readScript(a[i + 1] ?? '', depth + 1, found);
          return false;
        }
        if (i >= a.length) return false;
        drop(i);
        continue;
      }
      case 'xargs': {
        const i = skipOptions(
          a,
          1,
          new Set([
            '-a',
            '--arg-file',
            '-d',
            '--delimiter',
            '-E',
            '-e',
            '-I',
            '-i',
            '-L',
            '-l',
            '-n',
            '--max-args',
            '-P',
            '--max-procs',
            '-s',
            '--max-chars',
            '--process-slot-var',
          ]),
        );
        // xargs with no command runs echo; its arguments come from stdin (unknown, appended).
        if (i >= a.length) return false;
        drop(i);
        continue;
      }
      case 'busybox':
        if (a.length < 2) return false;
        drop(1);
        continue;
      case 'eval': {
        if (dyn.slice(1).some(Boolean)) found.uncertain.push({ reason: 'eval of an expansion' });
        readScript(a.slice(1).join(' '), depth + 1, found);
        return false;
      }
      case 'trap':
        if (a[1] !== undefined && !a[1].startsWith('-')) readScript(a[1], depth + 1, found);
        return false;
      case '.':
      case 'source':
        found.uncertain.push({ reason: `${prog} runs a script file the gate cannot read (${a[1] ?? ''})` });
        return false;
      case 'alias':
      case 'shopt':
        if (a.length > 1) found.uncertain.push({ reason: `${prog} changes what a later name runs` });
        return false;
      case 'find': {
        // find … -exec CMD … ; / + : CMD runs.
        for (let i = 1; i < a.length; i++) {
          if (!['-exec', '-execdir', '-ok', '-okdir'].includes(a[i]!)) continue;
          let j = i + 1;
          while (j < a.length && a[j] !== ';' && a[j] !== '+') j++;
          argvOf(a.slice(i + 1, j), depth + 1, found, dyn.slice(i + 1, j));
          i = j;
        }
        found.commands.push(a);
        return false;
      }
      default:
        break;
    }
    if (SHELLS.has(prog)) return shellOf(a, depth, found, stdin);
    const interp = /^(python|perl|ruby|node|nodejs|php|lua|bun|deno)[\d.]*$/.exec(prog)?.[1];
    if (interp !== undefined) {
      const flags = INLINE_PROGRAM[interp]!;
      const inline = (x: string): boolean =>
        flags.includes(x) ||
        (/^-[A-Za-z]+/.test(x) &&
          flags.some(
            (f) =>
              /^-[A-Za-z]$/.test(f) &&
              x
                .slice(1)
                .replace(/[^A-Za-z].*$/, '')
                .includes(f[1]!),
          ));
      if ((interp === 'deno' && a[1] === 'eval') || a.slice(1).some(inline))
        found.uncertain.push({ reason: `${prog} runs an inline program, which can run any command` });
    }
    if (AWKS.has(prog)) {
      let i = 1;
      let file = false;
      while (i < a.length && a[i]!.startsWith('-') && a[i] !== '--') {
        if (a[i] === '-f' || a[i]!.startsWith('--file')) file = true;
        i += ['-F', '-v', '-f', '--file', '--assign', '--field-separator'].includes(a[i]!) ? 2 : 1;
      }
      if (a[i] === '--') i++;
      const program = a[i] ?? '';
      if (file || /system|\||getline|@load|ENVIRON/.test(program) || dyn[i])
        found.uncertain.push({ reason: `${prog}'s program can run a command` });
    }
    found.commands.push(a);
    return false;
  }
  return false;
}

/** A shell: its `-c` script is read; a script file is unknowable; no script means stdin. Returns true when it reads stdin. */
function shellOf(a: string[], depth: number, found: Found, stdin: string | undefined): boolean {
  let i = 1;
  let script: string | undefined;
  let readsStdin = false;
  let takesC = false;
  while (i < a.length) {
    const x = a[i]!;
    if (x === '--' || x === '-') {
      i++;
      break;
    }
    if (/^[-+][A-Za-z]+$/.test(x)) {
      if (x.startsWith('-') && x.includes('c')) takesC = true;
      if (x.startsWith('-') && x.includes('s')) readsStdin = true;
      // -o OPTION / +o OPTION take a value.
      if (/o$/.test(x)) i++;
      i++;
      continue;
    }
    if (x.startsWith('--')) {
      if (['--rcfile', '--init-file'].includes(x)) i++;
      i++;
      continue;
    }
    break;
  }
  if (takesC) {
    script = a[i];
    if (script === undefined) return false;
    readScript(script, depth + 1, found);
    return false;
  }
  if (!readsStdin && i < a.length) {
    found.uncertain.push({ reason: `${base(a[0]!)} runs a script file the gate cannot read (${a[i]})` });
    return false;
  }
  // The exec's own shell runs the request's stdin; a shell inside a script reads whatever its input is.
  if (depth === 0) {
    if (stdin !== undefined) readScript(stdin, depth + 1, found);
  } else found.uncertain.push({ reason: `${base(a[0]!)} runs commands read from its input` });
  return true;
}

// --- Normal forms and matching --------------------------------------------------------------

/** Splits combined short flags (`-rf` → `-r -f`) of a command's option arguments (before `--`). */
function splitFlags(args: string[]): string[] {
  const out: string[] = [];
  let options = true;
  for (const x of args) {
    if (x === '--') options = false;
    if (options && /^-[A-Za-z]{2,}$/.test(x)) for (const c of x.slice(1)) out.push(`-${c}`);
    else out.push(x);
  }
  return out;
}

/**
 * A command's normal form as words: program by base name (`git-push` → `git push`), git's
 * global options removed (its `-c alias.*` aliases followed), flags split, rm's long flags
 * mapped. `uncertain` is set when git runs a subcommand that is not one of its own.
 */
/** A `-c KEY=VALUE` whose key cannot make git run a program. */
function gitSafeConfig(setting: string): boolean {
  const key = setting.split('=')[0]!.toLowerCase();
  return GIT_SAFE_CONFIG.some((k) => (k.endsWith('*') ? key.startsWith(k.slice(0, -1)) : key === k));
}

function normalise(argv: string[], forPattern = false): { words: string[]; uncertain?: string; anyProgram?: boolean } {
  let words = [base(argv[0]!), ...argv.slice(1)];
  const core = /^git-([a-z-]+)$/.exec(words[0]!);
  if (core && GIT_COMMANDS.has(core[1]!)) words = ['git', core[1]!, ...words.slice(1)];
  let uncertain: string | undefined;
  if (words[0] === 'git') {
    const aliases = new Map<string, string>();
    let i = 1;
    while (i < words.length) {
      const x = words[i]!;
      if (!x.startsWith('-')) break;
      const name = x.includes('=') ? x.slice(0, x.indexOf('=')) : x;
      let value: string | undefined;
      if (GIT_VALUE_OPTIONS.has(name) && !x.includes('=')) {
        value = words[i + 1];
        i += 2;
      } else {
        if (x.startsWith('-C') && x.length > 2) value = x.slice(2);
        else if (x.includes('=')) value = x.slice(x.indexOf('=') + 1);
        i += 1;
      }
      if (name === '-c' && value !== undefined) {
        const m = /^alias\.([^=]+)=(.*)$/is.exec(value);
        if (m) aliases.set(m[1]!.toLowerCase(), m[2]!);
        else if (!forPattern && !gitSafeConfig(value))
          return { words, uncertain: `git -c ${value.split('=')[0]} can make git run another command`, anyProgram: true };
      }
      if (name === '--config-env' && !forPattern)
        return { words, uncertain: `git --config-env sets configuration the gate cannot read`, anyProgram: true };
    }
    const sub = words[i];
    if (!forPattern && sub !== undefined) {
      const alias = aliases.get(sub.toLowerCase());
      if (alias !== undefined) {
        if (alias.startsWith('!')) return { words, uncertain: `git alias ${sub} runs a shell command`, anyProgram: true };
        // The alias's words replace it (the global options before it are gone, so this ends).
        return normalise(['git', ...splitBlanks(alias), ...words.slice(i + 1)]);
      }
      if (!GIT_COMMANDS.has(sub) && !sub.includes('*'))
        uncertain = `git ${sub} is not one of git's own commands (an alias or an extension?)`;
    }
    words = ['git', ...words.slice(i)];
  }
  return normaliseGitRest(words, uncertain);
}

function normaliseGitRest(words: string[], uncertain: string | undefined): { words: string[]; uncertain?: string } {
  const headLength = words[0] === 'git' && words[1] !== undefined ? 2 : 1;
  const head = words.slice(0, headLength);
  const map = LONG_FLAGS[head.join(' ')] ?? {};
  const rest = splitFlags(words.slice(headLength)).map((x) => map[x] ?? x);
  return { words: [...head, ...rest], ...(uncertain ? { uncertain } : {}) };
}

function globRegExp(pattern: string): RegExp {
  return new RegExp(
    `^${pattern
      .split('*')
      .map((p) => p.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&'))
      .join('.*')}$`,
    's',
  );
}

interface CompiledPattern {
  source: string;
  /** The program's part (program, and git's subcommand) as globs. */
  head: string[];
  /** Flags the command must carry (anywhere among its options), in their normal form. */
  flags: string[];
  /** What is left, as a glob over the rest of the command's words joined by spaces. */
  rest: RegExp;
  /** The rest may also be empty (the pattern's rest is ` *`). */
  restMayBeEmpty: boolean;
  /** `git push*`: the program part's trailing * reaches over every later word. */
  headReaches: boolean;
}

function compile(pattern: string): CompiledPattern {
  const raw = splitBlanks(pattern);
  const first = raw[0] ?? '';
  const norm = first.includes('*') ? { words: [first, ...raw.slice(1)] } : normalise(raw, true);
  const words = norm.words;
  const headLength = words[0] === 'git' && words[1] !== undefined && !words[1].startsWith('-') ? 2 : 1;
  const head = words.slice(0, headLength);
  const flags: string[] = [];
  const rest: string[] = [];
  for (const w of words.slice(headLength)) {
    if (/^-/.test(w) && !w.includes('*') && w !== '--') flags.push(w);
    else rest.push(w);
  }
  // `git push*` keeps the old reading: everything after the program's part is free.
  const headReaches = rest.length === 0 && flags.length === 0 && head[head.length - 1]!.endsWith('*');
  const restMayBeEmpty = rest.length === 0 || rest.every((w) => w === '*');
  return { source: pattern, head, flags, rest: globRegExp(rest.join(' ')), restMayBeEmpty, headReaches };
}

function optionsOf(words: string[]): Set<string> {
  const out = new Set<string>();
  for (const w of words) {
    if (w === '--') break;
    if (w.startsWith('-')) out.add(w);
  }
  return out;
}

function matches(p: CompiledPattern, words: string[]): boolean {
  if (words.length < p.head.length) return false;
  for (let k = 0; k < p.head.length; k++) {
    const h = p.head[k]!;
    const last = k === p.head.length - 1;
    // A trailing * on the program's part (`git push*`) reaches over the rest of the words.
    if (last && p.headReaches) return globRegExp(h).test(words.slice(k).join(' '));
    if (!globRegExp(h).test(words[k]!)) return false;
  }
  const rest = words.slice(p.head.length);
  const options = optionsOf(rest);
  if (!p.flags.every((f) => options.has(f))) return false;
  const wanted = new Set(p.flags);
  let inOptions = true;
  const left = rest.filter((w) => {
    if (w === '--') inOptions = false;
    return !(inOptions && wanted.has(w));
  });
  const text = left.join(' ');
  return p.rest.test(text) || (p.restMayBeEmpty && text === '');
}

/**
 * The first `approvals.commands` pattern an exec matches, read as described at the top of this
 * file; an exec the gate cannot read is matched by the first pattern, with the reason.
 * `stdin`: the exec's standard input (a shell with no script runs it).
 */
export function gateCommand(
  patterns: string[],
  command: string[],
  opts: { stdin?: string; env?: Record<string, string> } = {},
): CommandGateMatch | undefined {
  if (patterns.length === 0 || command.length === 0) return undefined;
  const found: Found = { commands: [], uncertain: [] };
  for (const name of Object.keys(opts.env ?? {})) dangerousEnv(name, found);
  argvOf(command, 0, found, [], opts.stdin);
  const compiled = patterns.map(compile);
  for (const c of found.commands) {
    const n = normalise(c);
    if (n.uncertain) found.uncertain.push({ reason: n.uncertain, ...(n.anyProgram ? {} : { program: n.words[0] }) });
    const p = compiled.find((x) => matches(x, n.words));
    if (p) return { pattern: p.source, command: n.words.join(' ') };
  }
  for (const doubt of found.uncertain) {
    const p = compiled.find((x) => doubt.program === undefined || globRegExp(x.head[0]!).test(doubt.program));
    if (p) return { pattern: p.source, command: command.join(' '), uncertain: doubt.reason };
  }
  return undefined;
}

/** The first pattern an exec matches (see gateCommand), or undefined when it may run at once. */
export function matchCommand(
  patterns: string[],
  command: string[],
  opts: { stdin?: string; env?: Record<string, string> } = {},
): string | undefined {
  return gateCommand(patterns, command, opts)?.pattern;
}

// --- What an approval is for ---------------------------------------------------------------

const sha256 = (data: Buffer | string): string => createHash('sha256').update(data).digest('hex');

/**
 * An exec's stdin and env as an approval records them: digests (`stdinSha256`; `env`: each
 * variable's name with a digest of its value; `envSha256`: one digest of them all), and the first
 * characters of stdin for the human. Null digests: no stdin, no env.
 */
export function execInputs(
  stdinBase64: string | undefined,
  env: Record<string, string> | undefined,
): { stdinSha256: string | null; envSha256: string | null; payload: Record<string, unknown> } {
  const stdin = stdinBase64 === undefined ? undefined : Buffer.from(stdinBase64, 'base64');
  const stdinSha256 = stdin === undefined ? null : sha256(stdin);
  const names = Object.keys(env ?? {}).sort();
  const envDigests = Object.fromEntries(names.map((n) => [n, sha256(env![n]!)]));
  const envSha256 = names.length === 0 ? null : sha256(JSON.stringify(names.map((n) => [n, envDigests[n]])));
  const preview = stdin === undefined ? undefined : stdin.subarray(0, 200).toString('utf8').replace(/\0/g, '\uFFFD');
  return {
    stdinSha256,
    envSha256,
    payload: {
      ...(stdin === undefined ? {} : { stdinSha256, stdinBytes: stdin.length, stdinPreview: preview }),
      ...(envSha256 === null ? {} : { env: envDigests, envSha256 }),
    },
  };
}
