import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { simulatorSandboxArgv } from '../../src/sandbox/index.js';
import { startSimulator, stopSimulator, type SimulatorHandle, type SimulatorSpec, type SimulatorType } from '../../src/simulators/index.js';

/** Simulators run as an unprivileged uid when the tests run as root (PostgreSQL refuses root). */
export const RUN_AS = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;

function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** The simulator's own program: the handle's pid is its sandbox's monitor (bwrap), then the namespace's init, then it. */
export function programOf(h: SimulatorHandle): number {
  const init = childrenOf(h.pid)[0];
  const program = init === undefined ? undefined : childrenOf(init)[0];
  assert.ok(program, `simulator ${h.name}: no program under its sandbox ${h.pid}`);
  return program;
}

function status(pid: number, field: string): string {
  const m = new RegExp(`^${field}:\\s+(.*)$`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  assert.ok(m, `no ${field} in /proc/${pid}/status`);
  return m[1]!.trim();
}

/**
 * Asserts what the simulator's sandbox promises, read from the host's /proc: namespaces of its
 * own (network, PID, mount, IPC, UTS), the unprivileged uid, no capability, an empty bounding
 * set, no_new_privs; and that its program sees none of the host's processes.
 */
export function assertSandboxed(h: SimulatorHandle): number {
  const program = programOf(h);
  for (const ns of ['net', 'pid', 'mnt', 'ipc', 'uts']) {
    assert.notEqual(
      readlinkSync(`/proc/${program}/ns/${ns}`),
      readlinkSync(`/proc/self/ns/${ns}`),
      `${h.name} shares the host's ${ns} namespace`,
    );
  }
  const uid = Number(status(program, 'Uid').split(/\s+/)[0]);
  assert.equal(uid, RUN_AS ? RUN_AS.uid : process.getuid!());
  assert.notEqual(uid, 0);
  for (const cap of ['CapEff', 'CapPrm', 'CapBnd', 'CapInh', 'CapAmb'])
    assert.equal(status(program, cap), '0000000000000000', `${h.name}: ${cap}`);
  assert.equal(status(program, 'NoNewPrivs'), '1');
  // Its PID namespace: the program is pid 2 (after the namespace's init), the host's numbers never show.
  const nspid = status(program, 'NSpid').split(/\s+/);
  assert.equal(nspid.at(-1), '2');
  return program;
}

/**
 * Where `dir` (a host directory) is inside its filesystem: the device (major:minor) and the path
 * from that filesystem's root, which is what mountinfo shows of a bind from it (a workshop with a
 * disk quota is a filesystem of its own: its binds show `/simulators/…`, not the host path).
 */
function fsPath(dir: string): { device: string; path: string } {
  let best: { device: string; path: string; mountPoint: string } | undefined;
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [, , device, root, mountPoint] = line.split(' ');
    if (!device || !root || !mountPoint) continue;
    if (dir !== mountPoint && !dir.startsWith(mountPoint === '/' ? '/' : `${mountPoint}/`)) continue;
    if (best && best.mountPoint.length >= mountPoint.length) continue;
    const rest = dir.slice(mountPoint === '/' ? 0 : mountPoint.length);
    best = { device, mountPoint, path: root === '/' ? rest || '/' : `${root}${rest}` };
  }
  return best ? { device: best.device, path: best.path } : { device: '', path: dir };
}

/**
 * Live processes that have `dir` (a host directory) mounted: the members of the sandboxes it
 * was given to, whatever their command line says (a sandboxed program names only its inside paths).
 */
export function processesMounting(dir: string): number[] {
  const { device, path } = fsPath(dir);
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (/^State:\s+[ZX]/m.test(readFileSync(`/proc/${e}/status`, 'utf8'))) continue;
      for (const line of readFileSync(`/proc/${e}/mountinfo`, 'utf8').split('\n')) {
        const [, , dev, root] = line.split(' ');
        if (dev === device && (root === path || root?.startsWith(`${path}/`))) {
          out.push(Number(e));
          break;
        }
      }
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

export interface SimulatorFixture {
  /** The scratch directory of the suite (set in its `before`). */
  readonly base: string;
  readonly handles: SimulatorHandle[];
  readonly socketDir: string;
  readonly cacheDir: string;
  /** A spec of the suite's type under `base`, with `extra` over it. */
  spec(name: string, extra?: Partial<Omit<SimulatorSpec, 'sandbox'>>): SimulatorSpec;
  /** Starts a simulator and remembers it for the clean-up. */
  start(spec: SimulatorSpec): Promise<SimulatorHandle>;
}

/**
 * The scaffolding of a simulator type's suite, registered in the calling `describe`: a scratch
 * directory the simulator's uid can walk down to (`before`), every started simulator stopped
 * and the directory removed (`after`, after `cleanUp`).
 */
export function simulatorFixture(type: SimulatorType, cleanUp?: (base: string) => Promise<void> | void): SimulatorFixture {
  const f = {
    base: '',
    handles: [] as SimulatorHandle[],
    get socketDir(): string {
      return join(f.base, 'sock');
    },
    get cacheDir(): string {
      return join(f.base, 'cache');
    },
    spec: (name: string, extra: Partial<Omit<SimulatorSpec, 'sandbox'>> = {}): SimulatorSpec => ({
      type,
      name,
      dir: join(f.base, 'services', name),
      socketDir: f.socketDir,
      cacheDir: f.cacheDir,
      runAs: RUN_AS,
      sandbox: simulatorSandboxArgv,
      ...extra,
    }),
    start: async (s: SimulatorSpec): Promise<SimulatorHandle> => {
      const h = await startSimulator(s);
      f.handles.push(h);
      return h;
    },
  };
  before(() => {
    f.base = mkdtempSync(join(tmpdir(), `atelier-sim-${type}-`));
    chmodSync(f.base, 0o755);
  });
  after(async () => {
    for (const h of f.handles) await stopSimulator(h).catch(() => undefined);
    await cleanUp?.(f.base);
    rmSync(f.base, { recursive: true, force: true });
  });
  return f;
}
