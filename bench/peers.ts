/**
 * The peers Atelier is measured against in the same run (DESIGN.md, "Peers to measure against"):
 * a bare `bwrap` with comparable isolation flags, and `srt` (@anthropic-ai/sandbox-runtime).
 */
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hasCommand, REPO_ROOT, timedSpawn, type TimedRun } from './lib.js';

/** bwrap flags comparable to a workshop's: new PID and network namespaces, read-only /usr, /proc, /dev. */
export function bareBwrapArgs(command: string[]): string[] {
  const args = ['--unshare-pid', '--unshare-net', '--ro-bind', '/usr', '/usr'];
  for (const name of ['bin', 'lib', 'lib64', 'sbin']) {
    const path = `/${name}`;
    try {
      const st = lstatSync(path);
      if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(path), path);
      else if (st.isDirectory()) args.push('--ro-bind', path, path);
    } catch {
      // absent on this host
    }
  }
  args.push('--proc', '/proc', '--dev', '/dev', '--', ...command);
  return args;
}

/** One bare `bwrap … true`, spawned from this process; throws unless it exits 0. */
export async function runBareBwrap(command: string[] = ['true']): Promise<number> {
  const r = await timedSpawn('bwrap', bareBwrapArgs(command), { env: { PATH: '/usr/bin:/bin' } });
  if (r.code !== 0) throw new Error(`bare bwrap exited ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`);
  return r.ms;
}

export function bwrapAvailable(): string | undefined {
  return hasCommand('bwrap') ? undefined : 'bwrap is not installed (apt-get install bubblewrap)';
}

export interface Srt {
  bin: string;
  version: string;
  engines: string | undefined;
  settings: string;
  cwd: string;
  /** Why it is expected to misbehave but was tried anyway (engines), for the report. */
  note: string | undefined;
}

/**
 * Finds `srt` (the devDependency, else PATH), checks that it can run here, and returns how to
 * run it; or a plain reason why it cannot, so that the caller skips just this peer.
 */
export async function probeSrt(scratchDir: string): Promise<{ srt: Srt } | { skip: string }> {
  const local = join(REPO_ROOT, 'node_modules', '.bin', 'srt');
  const bin = existsSync(local) ? local : hasCommand('srt') ? 'srt' : undefined;
  if (!bin) return { skip: 'srt is not installed: `npm ci` installs the devDependency @anthropic-ai/sandbox-runtime' };
  let version = '?';
  let engines: string | undefined;
  try {
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'node_modules', '@anthropic-ai', 'sandbox-runtime', 'package.json'), 'utf8')) as {
      version: string;
      engines?: { node?: string };
    };
    version = pkg.version;
    engines = pkg.engines?.node;
  } catch {
    // srt from PATH: version from its own --version below
  }
  const missing = ['bwrap', 'socat', 'rg'].filter((t) => !hasCommand(t));
  if (missing.length > 0) {
    const pkgs = missing.map((t) => (t === 'rg' ? 'ripgrep' : t === 'bwrap' ? 'bubblewrap' : t));
    return { skip: `srt ${version} needs ${missing.join(', ')} on PATH, missing here (apt-get install ${pkgs.join(' ')})` };
  }
  const dir = join(scratchDir, 'srt');
  mkdirSync(dir, { recursive: true });
  const settings = join(dir, 'srt-settings.json');
  // No network, no writes: the strictest config srt accepts, closest to a workshop's defaults.
  writeFileSync(
    settings,
    `${JSON.stringify({ network: { allowedDomains: [], deniedDomains: [] }, filesystem: { denyRead: [], allowWrite: [], denyWrite: [] } })}\n`,
  );
  const srt: Srt = { bin, version, engines, settings, cwd: dir, note: undefined };
  let r: TimedRun;
  try {
    r = await runSrtOnce(srt, ['sh', '-c', 'echo srt-ok']);
  } catch (err) {
    return { skip: `srt ${version} could not be started: ${(err as Error).message}` };
  }
  const nodeMajor = Number(process.versions.node.split('.')[0]);
  if (r.code !== 0 || !r.stdout.includes('srt-ok')) {
    const why = (
      r.stderr
        .trim()
        .split('\n')
        .find((l) => /error/i.test(l)) ??
      r.stderr.trim().split('\n')[0] ??
      ''
    ).slice(0, 300);
    const engineHint = engines && nodeMajor < 22 ? ` (its engines say node ${engines}; this is Node ${process.versions.node})` : '';
    return { skip: `srt ${version} cannot run here${engineHint}: exit ${r.code ?? r.signal}: ${why || 'no output'}` };
  }
  if (engines && nodeMajor < 22) srt.note = `srt ${version} declares node ${engines} but runs here on Node ${process.versions.node}`;
  return { srt };
}

export function runSrtOnce(srt: Srt, command: string[]): Promise<TimedRun> {
  return timedSpawn(srt.bin, ['-s', srt.settings, ...command], { cwd: srt.cwd });
}

/** One `srt true`; throws unless it exits 0. */
export async function runSrt(srt: Srt, command: string[] = ['true']): Promise<number> {
  const r = await runSrtOnce(srt, command);
  if (r.code !== 0) throw new Error(`srt exited ${r.code ?? r.signal}: ${r.stderr.trim().slice(0, 300)}`);
  return r.ms;
}
