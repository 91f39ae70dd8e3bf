import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AtelierError } from '../core/index.js';

/**
 * The dashboard Console (ADR-006 D7, kept by ADR-008 D5): it runs only these read-only `atelier`
 * sub-commands, as argv (never a shell), each with only the flags listed and its positional
 * arguments. `init`, `up`, `migrate`, `serve`, `server`, `upgrade`, `ext`, `plugins`, `actions
 * apply` and every write are out, on purpose: writes have their own narrower paths (the typed
 * actions among them). The typed actions never add to this list (a test pins it).
 */
export interface ConsoleCommand {
  /** The sub-command words, matched exactly (aliases such as `ls` are not). */
  readonly command: readonly string[];
  /** Positional arguments, in order: their names (all required). */
  readonly positionals: readonly string[];
  /** Flags it may take: the pattern of the value, or `true` for a flag without one. */
  readonly flags: Readonly<Record<string, RegExp | true>>;
}

const ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$/;
const NUMBER = /^[1-9][0-9]{0,6}$/;

function entry(command: string, positionals: string[] = [], flags: Record<string, RegExp | true> = {}): ConsoleCommand {
  return Object.freeze({
    command: Object.freeze(command.split(' ')),
    positionals: Object.freeze(positionals),
    flags: Object.freeze(flags),
  });
}

export const ALLOWED: readonly ConsoleCommand[] = Object.freeze([
  entry('workshops list'),
  entry('workshops status', ['id']),
  // Not --follow: it never ends.
  entry('workshops egress', ['id'], { '--limit': NUMBER }),
  entry('simulators list', ['id']),
  entry('simulators logs', ['id', 'name'], { '--tail': NUMBER }),
  entry('approvals list', [], {
    '--status': /^(PENDING|APPROVED|REJECTED|EXPIRED)$/,
    '--workshop': ID,
    '--category': /^(ALLOWLIST_EXPANSION|SECRET_REQUEST|PR_GATEWAY|SHELL_COMMAND)$/,
    '--all': true,
  }),
  entry('approvals show', ['id']),
  entry('projects list'),
  entry('actions list', [], { '--project': ID }),
  entry('actions journal', [], { '--project': ID }),
  entry('secrets list'),
  entry('tokens list'),
  entry('users list'),
  entry('audit verify'),
]);

/** The argv of a Console request, checked against ALLOWED; throws with what is refused and why. */
export function checkConsoleArgv(argv: readonly string[]): ConsoleCommand {
  const found = ALLOWED.filter((c) => c.command.every((w, i) => argv[i] === w)).sort((a, b) => b.command.length - a.command.length)[0];
  const refuse = (why: string): AtelierError =>
    new AtelierError('PERMISSION_DENIED', `the Console runs only read-only commands: ${why}`, {
      field: 'argv',
      allowed: ALLOWED.map((c) => c.command.join(' ')),
    });
  if (!found) throw refuse(`\`${argv.slice(0, 2).join(' ')}\` is not one of them (see details.allowed)`);
  const rest = argv.slice(found.command.length);
  const positionals: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i]!;
    if (a.startsWith('-')) {
      const [name, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
      const rule = Object.hasOwn(found.flags, name) ? found.flags[name] : undefined;
      if (rule === undefined) throw refuse(`${found.command.join(' ')} takes no ${name} here`);
      if (rule === true) {
        if (inline !== undefined) throw refuse(`${name} takes no value`);
        continue;
      }
      const value = inline ?? rest[++i];
      if (value === undefined || !rule.test(value)) throw refuse(`${name} needs a value matching ${rule.source}`);
    } else positionals.push(a);
  }
  if (positionals.length !== found.positionals.length)
    throw refuse(
      `${found.command.join(' ')} takes ${found.positionals.length === 0 ? 'no argument' : found.positionals.map((p) => `<${p}>`).join(' ')}`,
    );
  for (const p of positionals) if (!ID.test(p)) throw refuse(`${JSON.stringify(p)} is not a name or id`);
  return found;
}

export interface ConsoleResult {
  argv: string[];
  exitCode: number | null;
  stdout: string;
  stderr: string;
  /** Output past the limit was dropped. */
  truncated: boolean;
  /** The command ran past the time limit and was killed. */
  timedOut: boolean;
}

export interface ConsoleRunOptions {
  /**
   * The CLI's entry script, run by this node: the program that started the server names itself
   * (`atelier server start` passes its own path), so the Console runs the same release.
   */
  cli: string;
  /** The server's own URL (the child talks to it like any CLI). */
  url: string;
  /** The caller's own bearer credential: the command runs with exactly the caller's rights. */
  token: string;
  tenant?: string;
  output: 'table' | 'json' | 'yaml';
  timeoutMs?: number;
  maxOutputBytes?: number;
}

/**
 * Runs one ALLOWED command with our own CLI (`opts.cli`): argv only, no shell, an empty configuration
 * directory (no stored context or credential of the server's user), bounded time and output.
 */
export function runConsoleCommand(argv: readonly string[], opts: ConsoleRunOptions): Promise<ConsoleResult> {
  checkConsoleArgv(argv);
  const limit = opts.maxOutputBytes ?? 256 * 1024;
  const configDir = mkdtempSync(join(tmpdir(), 'atelier-console-'));
  const env: NodeJS.ProcessEnv = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: configDir,
    LANG: 'C.UTF-8',
    NO_COLOR: '1',
    ATELIER_CONFIG_DIR: configDir,
    ATELIER_URL: opts.url,
    ATELIER_TOKEN: opts.token,
    ...(opts.tenant ? { ATELIER_TENANT: opts.tenant } : {}),
  };
  const full = ['--output', opts.output, ...argv];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [opts.cli, ...full], { env, cwd: configDir, stdio: ['ignore', 'pipe', 'pipe'], shell: false });
    const out = { stdout: [] as Buffer[], stderr: [] as Buffer[], bytes: 0, truncated: false };
    const collect = (into: Buffer[]) => (chunk: Buffer) => {
      const room = limit - out.bytes;
      if (room <= 0) {
        out.truncated = true;
        return;
      }
      if (chunk.length > room) out.truncated = true;
      const part = chunk.subarray(0, room);
      into.push(part);
      out.bytes += part.length;
    };
    child.stdout.on('data', collect(out.stdout));
    child.stderr.on('data', collect(out.stderr));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? 20_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      rmSync(configDir, { recursive: true, force: true });
      reject(new AtelierError('UNAVAILABLE', `the Console could not run atelier: ${err.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      rmSync(configDir, { recursive: true, force: true });
      resolve({
        argv: ['atelier', ...full],
        exitCode: code,
        stdout: Buffer.concat(out.stdout).toString('utf8'),
        stderr: Buffer.concat(out.stderr).toString('utf8'),
        truncated: out.truncated,
        timedOut,
      });
    });
  });
}
