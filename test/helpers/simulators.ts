import { after, before } from 'node:test';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimulator, stopSimulator, type SimulatorHandle, type SimulatorSpec, type SimulatorType } from '../../src/simulators/index.js';

/** Simulators run as an unprivileged uid when the tests run as root (PostgreSQL refuses root). */
export const RUN_AS = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : undefined;

export interface SimulatorFixture {
  /** The scratch directory of the suite (set in its `before`). */
  readonly base: string;
  readonly handles: SimulatorHandle[];
  readonly socketDir: string;
  readonly cacheDir: string;
  /** A spec of the suite's type under `base`, with `extra` over it. */
  spec(name: string, extra?: Partial<SimulatorSpec>): SimulatorSpec;
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
    spec: (name: string, extra: Partial<SimulatorSpec> = {}): SimulatorSpec => ({
      type,
      name,
      dir: join(f.base, 'services', name),
      socketDir: f.socketDir,
      cacheDir: f.cacheDir,
      runAs: RUN_AS,
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
