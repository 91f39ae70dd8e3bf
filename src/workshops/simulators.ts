import { existsSync, lstatSync, mkdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { AtelierError, writeFileAtomic, type SimulatorRequest } from '../core/index.js';
import { queryRows, type Pool } from '../db/index.js';
import { INTERNAL_SUFFIX } from '../egress/index.js';
import { childCgroups, procsFiles, simulatorSandboxArgv, type SandboxHandle, type SandboxLayout } from '../sandbox/index.js';
import {
  checkSimulatorRequest,
  dropSimulatorSpares,
  isAlive,
  processTree,
  seedSimulatorSpares,
  redactSimulatorEnv,
  removeSimulator,
  resetSimulator,
  DEFAULT_SIMULATOR_NAMES,
  SIMULATOR_TYPES,
  simulatorLogs,
  simulatorPort,
  startSimulator,
  stopSimulator,
  type RunAs,
  type SimulatorHandle,
  type SimulatorSpec,
  type SimulatorType,
  type StartTimings,
} from '../simulators/index.js';
import { AWS_BIN_INSIDE, writeAwsConfig, type AwsEndpoint } from './awsConfig.js';
import type { InternalNetwork, InternalServiceSpec } from './internal.js';

/** How many simulators one workshop may run at once. */
export const MAX_SIMULATORS_PER_WORKSHOP = 8;

/** How long after its create a workshop without postgres gives its spare postgres data back. */
const DROP_SPARES_DELAY_MS = 3000;

export type SimulatorStatus = 'Starting' | 'Running' | 'Failed' | 'Stopped';

/** What `atelier simulators list` shows of one simulator. */
export interface SimulatorView {
  name: string;
  type: string;
  version: string | null;
  status: SimulatorStatus;
  statusReason: string | null;
  /** Where the workshop reaches it. */
  endpoint: { host: string; port: number } | null;
  /** Connection details (also in the workshop's environment and /run/atelier/simulators.json). */
  env: Record<string, string>;
  restarts: number;
  /** Resident memory of its processes, when running. */
  memoryBytes: number | null;
  processes: number | null;
  createdAt: string;
}

interface SimRow {
  workshop_id: string;
  name: string;
  type: string;
  request: SimulatorRequest;
  handle: SimulatorHandle | null;
  status: SimulatorStatus;
  status_reason: string | null;
  restarts: number;
  created_at: Date;
}

/** What the manager needs of a running workshop. */
export interface WorkshopContext {
  id: string;
  /** Its hostname (for /etc/hosts). */
  hostname: string;
  uid: number;
  sandbox: SandboxHandle;
  layout: SandboxLayout;
}

export interface SimulatorManagerOptions {
  dataDir: string;
  /** The server is an ordinary user: simulators run as that user, not as the workshop's uid. */
  rootless: boolean;
  internal: InternalNetwork;
  /** Internal services every workshop has besides its simulators (the API). */
  baseServices: (workshopId: string) => InternalServiceSpec[];
  log: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void; error(obj: object, msg?: string): void };
}

/**
 * The simulator's processes: those of its own cgroup when it has one (a file read; everything
 * it started is there and cannot leave), else its process tree (a walk of all of /proc, ~10 ms).
 */
function processesOf(handle: SimulatorHandle): Array<{ pid: number }> {
  const procs = handle.cgroupProcs?.[0];
  if (procs) {
    try {
      return readFileSync(procs, 'utf8')
        .split('\n')
        .filter((l) => /^\d+$/.test(l))
        .map((l) => ({ pid: Number(l) }));
    } catch {
      // the cgroup is gone (a server restarted without it): the tree below
    }
  }
  return processTree(handle.pid);
}

function memoryOf(handle: SimulatorHandle): { memoryBytes: number; processes: number } | null {
  if (!isAlive(handle)) return null;
  let memoryBytes = 0;
  const tree = processesOf(handle);
  for (const p of tree) {
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'));
      if (m) memoryBytes += Number(m[1]) * 1024;
    } catch {
      // exited meanwhile
    }
  }
  return { memoryBytes, processes: tree.length };
}

/** The name a request gets: its own, else its type's label (`localstack` → `aws`). */
export function simulatorName(req: SimulatorRequest): string {
  const type = (req.type ?? req.name)!;
  return req.type === undefined
    ? ((DEFAULT_SIMULATOR_NAMES as Record<string, string>)[type] ?? type)
    : (req.name ?? (DEFAULT_SIMULATOR_NAMES as Record<string, string>)[type] ?? type);
}

/** atelier.yaml's simulators, with those given at create time replacing any of the same name. */
export function mergeSimulators(project: SimulatorRequest[], given: SimulatorRequest[]): SimulatorRequest[] {
  const names = new Set(given.map(simulatorName));
  return [...project.filter((r) => !names.has(simulatorName(r))), ...given];
}

/** What can be refused before anything is made: unknown types, a name twice, too many. */
/** The request's type, checked against the catalog. */
function knownType(req: SimulatorRequest, field: string): SimulatorType {
  const type = (req.type ?? req.name)!;
  if (!(SIMULATOR_TYPES as readonly string[]).includes(type)) {
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `unknown simulator type ${JSON.stringify(type)}: this server runs ${SIMULATOR_TYPES.join(', ')}` +
        (req.type === undefined ? ' (give `type:` to name a simulator freely)' : ''),
      { field },
    );
  }
  return type as SimulatorType;
}

/** Refuses a workshop with more than MAX_SIMULATORS_PER_WORKSHOP simulators. */
function checkCount(count: number, field: string): void {
  if (count > MAX_SIMULATORS_PER_WORKSHOP)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `a workshop runs at most ${MAX_SIMULATORS_PER_WORKSHOP} simulators (this would make ${count}): remove some from atelier.yaml or the request`,
      { field },
    );
}

/**
 * The checks a create request gets before anything exists: types, `env` names and options the
 * type does not read, versions not installed, names given twice, count. `where` prefixes the
 * field and the message (`atelier.yaml: simulators.0.env.PGPORT: …`).
 */
export function precheckSimulators(requests: SimulatorRequest[], field = 'simulators', where = ''): void {
  const names = new Set<string>();
  requests.forEach((r, i) => {
    const name = simulatorName(r);
    try {
      checkSimulatorRequest({ ...r, type: knownType(r, ''), name });
    } catch (err) {
      if (!(err instanceof AtelierError)) throw err;
      const key = err.details?.field;
      const path = `${field}.${i}${typeof key === 'string' && key !== '' ? `.${key}` : ''}`;
      throw new AtelierError(err.code, `${where}${path}: ${err.message}`, { ...err.details, field: path });
    }
    if (names.has(name))
      throw new AtelierError('INVALID_ARGUMENT', `${where}two simulators are named ${name}: give one of them another name`, { field });
    names.add(name);
  });
  checkCount(names.size, field);
}

function envPrefix(name: string): string {
  return name.toUpperCase().replace(/-/g, '_');
}

/**
 * The simulators of every workshop of this server: started with the workshop (atelier.yaml,
 * `--simulator`) or live (`request`), reachable inside it at `<name>.atelier.internal`
 * (InternalNetwork), restarted after a crash, gone with the workshop.
 */
export class SimulatorManager {
  /** Per workshop: the environment new execs get (kept in memory, rebuilt from the rows). */
  private readonly envs = new Map<string, Record<string, string>>();
  /** Per workshop with a localstack simulator: the run directory its AWS files are in (awsConfig.ts). */
  private readonly awsRunDirs = new Map<string, string>();
  /** Workshops being started or stopped here, so the watchdog leaves them alone. */
  private readonly busy = new Set<string>();
  private watchdog: NodeJS.Timeout | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly opts: SimulatorManagerOptions,
  ) {}

  get cacheDir(): string {
    return join(this.opts.dataDir, 'simulators', 'cache');
  }

  /**
   * Where a workshop's simulators keep their files: inside the workshop's own directory, so that
   * whatever counts or limits that directory (its disk quota) covers their data too.
   */
  private workshopDir(layout: SandboxLayout): string {
    return join(layout.root, 'simulators');
  }

  /**
   * Fills a workshop filesystem not yet given to a workshop (a spare disk mounted at `root`)
   * with the simulators' spares (one copy of the PostgreSQL template): the first postgres start
   * of the workshop that takes it renames that copy instead of copying ~35 MB.
   *
   * Only while some workshop of the installation has a postgres simulator: elsewhere that copy
   * is ~35 MB written into every spare disk and removed again by every create (~70 MB of I/O
   * per workshop, in the background of the next creates, for nothing). The first postgres
   * workshop after a quiet spell copies the template at its start instead (~100 ms idle).
   */
  async seedSpares(root: string, signal?: AbortSignal): Promise<void> {
    const used = await queryRows<{ used: boolean }>(
      this.pool,
      "SELECT EXISTS (SELECT 1 FROM workshop_simulators WHERE type = 'postgres') AS used",
    ).catch(() => [{ used: true }]);
    if (!used[0]?.used || signal?.aborted) return;
    await seedSimulatorSpares({ simulatorsDir: join(root, 'simulators'), cacheDir: this.cacheDir, signal });
  }

  /** Where servers before this one kept a workshop's simulators (removed with the workshop). */
  private legacyDir(id: string): string {
    return join(this.opts.dataDir, 'simulators', id);
  }

  private runAs(ctx: { uid: number }): RunAs | undefined {
    return this.opts.rootless ? undefined : { uid: ctx.uid, gid: ctx.uid };
  }

  /** Checks one request and makes it a spec (nothing starts). */
  resolve(ctx: { id: string; uid: number; layout: SandboxLayout; sandbox?: SandboxHandle }, req: SimulatorRequest): SimulatorSpec {
    const type = knownType(req, 'type');
    const name = simulatorName(req);
    const base = this.workshopDir(ctx.layout);
    const spec: SimulatorSpec & { services?: string[]; stubsDirectory?: string } = {
      type,
      name,
      version: req.version,
      env: req.env,
      options: req.options,
      sandbox: simulatorSandboxArgv,
      dir: join(base, name),
      // A name cannot start with a dot: no simulator's own directory is ever this one.
      socketDir: join(base, '.sock'),
      cacheDir: this.cacheDir,
      runAs: this.runAs(ctx),
    };
    // Its own cgroups under the workshop's: it counts against the workshop's memory, CPU and
    // process limits, and is frozen and thawed with it (suspend, resume).
    const cgroups = ctx.sandbox?.cgroups;
    if (cgroups) spec.cgroupProcs = procsFiles(childCgroups(cgroups, `sim-${name}`));
    if (req.services !== undefined) spec.services = req.services;
    if (req.stubsDirectory !== undefined) spec.stubsDirectory = this.insideWorkspace(ctx.layout.workspace, req.stubsDirectory);
    return spec;
  }

  /** A workspace-relative directory, refused when it leaves the workspace (`..`, absolute, a link out). */
  private insideWorkspace(workspace: string, path: string): string {
    const bad = (why: string): AtelierError =>
      new AtelierError('INVALID_ARGUMENT', `stubsDirectory ${JSON.stringify(path)} ${why}`, { field: 'stubsDirectory' });
    if (path.startsWith('/')) throw bad('must be relative to the repository (like ./tests/mocks)');
    const full = join(workspace, path);
    if (!existsSync(full)) throw bad('does not exist in the repository');
    const real = realpathSync(full);
    const root = realpathSync(workspace);
    if (real !== root && !real.startsWith(root + sep)) throw bad('points outside the repository');
    if (!lstatSync(real).isDirectory()) throw bad('is not a directory');
    return real;
  }

  private async rows(workshopId: string): Promise<SimRow[]> {
    return queryRows<SimRow>(this.pool, 'SELECT * FROM workshop_simulators WHERE workshop_id = $1 ORDER BY created_at, name', [workshopId]);
  }

  private view(r: SimRow, credentials = true): SimulatorView {
    const h = r.handle;
    const mem = h && r.status === 'Running' ? memoryOf(h) : null;
    const env = h && r.status === 'Running' ? h.env : {};
    return {
      name: r.name,
      type: r.type,
      version: h?.version ?? null,
      status: r.status,
      statusReason: r.status_reason,
      endpoint: h ? h.endpoint : null,
      env: credentials ? env : redactSimulatorEnv(r.type, env),
      restarts: r.restarts,
      memoryBytes: mem?.memoryBytes ?? null,
      processes: mem?.processes ?? null,
      createdAt: r.created_at.toISOString(),
    };
  }

  /**
   * The workshop's simulators. `credentials`: whether the caller may operate the workshop (its
   * owner, a maintainer or admin of its tenant, its own agent as member): the others get the
   * connection variables with passwords redacted.
   */
  async list(workshopId: string, opts: { credentials: boolean }): Promise<SimulatorView[]> {
    return (await this.rows(workshopId)).map((r) => this.view(r, opts.credentials));
  }

  private async one(workshopId: string, name: string): Promise<SimRow> {
    const [r] = await queryRows<SimRow>(this.pool, 'SELECT * FROM workshop_simulators WHERE workshop_id = $1 AND name = $2', [
      workshopId,
      name,
    ]);
    if (!r)
      throw new AtelierError(
        'NOT_FOUND',
        `workshop ${workshopId} has no simulator named ${JSON.stringify(name)}: run \`atelier simulators list ${workshopId}\``,
        { name },
      );
    return r;
  }

  /** The environment new execs of the workshop get from its running simulators. */
  env(workshopId: string): Record<string, string> {
    return this.envs.get(workshopId) ?? {};
  }

  /** Directories to put first on the PATH of the workshop's execs (the `aws` wrapper, with a localstack simulator). */
  pathDirs(workshopId: string): string[] {
    return this.awsRunDirs.has(workshopId) ? [AWS_BIN_INSIDE] : [];
  }

  /**
   * Publishes the workshop's current simulators: listeners and hosts entries (InternalNetwork),
   * the environment of new execs, /run/atelier/simulators.json and /run/atelier/aws (awsConfig.ts).
   */
  /**
   * Opens the listeners of the workshop's own internal names (api, mcp…) inside it now, while the
   * create's other steps run: publish, at the end of the create, then costs no helper spawn (~20 ms).
   */
  prepareBase(ctx: WorkshopContext): Promise<void> {
    return this.opts.internal.prepare(ctx.id, ctx.sandbox, ctx.layout, this.opts.baseServices(ctx.id));
  }

  async publish(ctx: WorkshopContext): Promise<SimRow[]> {
    const rows = await this.rows(ctx.id);
    const services: InternalServiceSpec[] = [...this.opts.baseServices(ctx.id)];
    const env: Record<string, string> = {};
    const seenTypes = new Set<string>();
    const doc: Array<Record<string, unknown>> = [];
    let aws: AwsEndpoint | undefined;
    for (const r of rows) {
      const h = r.handle;
      doc.push({
        name: r.name,
        type: r.type,
        status: r.status,
        ...(r.status_reason ? { reason: r.status_reason } : {}),
        ...(h ? { host: h.endpoint.host, port: h.endpoint.port, version: h.version, env: r.status === 'Running' ? h.env : {} } : {}),
      });
      if (!h || r.status !== 'Running') continue;
      const label = h.endpoint.host.endsWith(INTERNAL_SUFFIX) ? h.endpoint.host.slice(0, -INTERNAL_SUFFIX.length) : h.name;
      const tcp = (h as SimulatorHandle & { tcp?: { host: string; port: number } }).tcp;
      services.push({ label, port: h.endpoint.port, target: tcp ? { host: tcp.host, port: tcp.port } : { path: h.socket } });
      // The first simulator of each type gets the usual names (DATABASE_URL…); each one whose
      // name is not its type's also gets them prefixed with its name (ORDERS_DATABASE_URL…).
      // A prefixed name that the key already starts with (AWS_ENDPOINT_URL of the localstack
      // named `aws`) would only repeat the unprefixed variable this simulator just gave.
      const first = !seenTypes.has(r.type);
      if (first) {
        seenTypes.add(r.type);
        Object.assign(env, h.env);
      }
      const prefix = `${envPrefix(r.name)}_`;
      if (r.name !== r.type) for (const [k, v] of Object.entries(h.env)) if (!(first && k.startsWith(prefix))) env[`${prefix}${k}`] = v;
      if (first && r.type === 'localstack') {
        const e = h.env;
        if (e.AWS_ENDPOINT_URL && e.AWS_REGION && e.AWS_ACCESS_KEY_ID && e.AWS_SECRET_ACCESS_KEY)
          aws = {
            endpoint: e.AWS_ENDPOINT_URL,
            region: e.AWS_REGION,
            accessKeyId: e.AWS_ACCESS_KEY_ID,
            secretAccessKey: e.AWS_SECRET_ACCESS_KEY,
          };
      }
    }
    Object.assign(env, writeAwsConfig(ctx.layout.run, aws));
    if (aws) this.awsRunDirs.set(ctx.id, ctx.layout.run);
    else this.awsRunDirs.delete(ctx.id);
    this.envs.set(ctx.id, env);
    await this.opts.internal.apply(ctx.id, ctx.sandbox, ctx.layout, ctx.hostname, services);
    writeFileAtomic(join(ctx.layout.run, 'simulators.json'), JSON.stringify({ simulators: doc }, null, 2) + '\n', 0o644);
    return rows;
  }

  /**
   * Starts simulators for a workshop and publishes them. A simulator that fails is recorded
   * Failed with the reason; the workshop is not affected (nor are the others). Bad requests
   * (unknown type, same name twice, too many) are refused before anything starts.
   */
  async start(ctx: WorkshopContext, requests: SimulatorRequest[], live = false): Promise<SimulatorView[]> {
    const tEnter = performance.now();
    // A declared simulator that cannot be made (unknown type, a stubs directory outside the
    // repository) is recorded Failed with the reason; the workshop goes on. A live request is refused.
    const specs = requests.map((req) => {
      const name = simulatorName(req);
      try {
        return { req, name, spec: this.resolve(ctx, req) as SimulatorSpec | undefined, error: undefined as string | undefined };
      } catch (err) {
        if (live || !(err instanceof AtelierError)) throw err;
        return { req, name, spec: undefined, error: err.message };
      }
    });
    const existing = await this.rows(ctx.id);
    const names = new Set(existing.map((r) => r.name));
    for (const spec of specs) {
      if (names.has(spec.name))
        throw new AtelierError(
          'ALREADY_EXISTS',
          `workshop ${ctx.id} already has a simulator named ${spec.name}: give another name (\`name\`) or reset it with \`atelier simulators reset ${ctx.id} ${spec.name}\``,
          { field: 'name', name: spec.name },
        );
      names.add(spec.name);
    }
    checkCount(names.size, 'simulators');
    // A workshop created without postgres gives the spare its disk came with back to its quota
    // (a live request later copies the template once, then keeps a spare like any user of it).
    // Later, not during the create and its first exec (the removal's I/O slowed them by ~10 ms).
    if (!live && !specs.some((s) => s.spec?.type === 'postgres')) {
      const dir = this.workshopDir(ctx.layout);
      setTimeout(() => {
        void dropSimulatorSpares(dir).catch((err: unknown) =>
          this.opts.log.warn({ workshop: ctx.id, err: String(err) }, 'could not remove the spare simulator data of a workshop'),
        );
      }, DROP_SPARES_DELAY_MS).unref();
    }
    if (specs.length === 0) {
      await this.publish(ctx);
      return [];
    }
    for (const { req, name, spec, error } of specs) {
      try {
        await queryRows(
          this.pool,
          'INSERT INTO workshop_simulators (workshop_id, name, type, request, status, status_reason) VALUES ($1, $2, $3, $4, $5, $6)',
          [ctx.id, name, req.type ?? req.name, JSON.stringify(req), spec ? 'Starting' : 'Failed', error ?? null],
        );
      } catch (err) {
        if ((err as AtelierError).code === 'ALREADY_EXISTS' || (err as { code?: string }).code === '23505')
          throw new AtelierError('ALREADY_EXISTS', `workshop ${ctx.id} already has a simulator named ${name}`, { field: 'name' });
        throw err;
      }
    }
    mkdirSync(this.workshopDir(ctx.layout), { recursive: true, mode: 0o711 });
    const t0 = performance.now();
    const phases: Record<string, StartTimings> = {};
    this.busy.add(ctx.id);
    try {
      // The listeners inside the workshop open while the simulators start (a helper spawn
      // each time otherwise, after the start): publishing them then only writes names.
      const listening = this.opts.internal
        .prepare(
          ctx.id,
          ctx.sandbox,
          ctx.layout,
          specs.flatMap(({ spec }) => (spec ? [{ label: spec.name, port: simulatorPort(spec.type) }] : [])),
        )
        .catch((err: Error) => err);
      const refused = (
        await Promise.all(specs.map(({ spec }) => (spec ? this.launch(ctx.id, spec, false, live, (phases[spec.name] = {})) : undefined)))
      ).find((e) => e !== undefined);
      // A listener that could not open is retried, and its error reported, by the publish below.
      await listening;
      // A live request with bad input (an unsupported version, an unknown option) is the
      // caller's error to fix, not a Failed simulator to keep.
      if (refused) {
        await this.publish(ctx).catch(() => undefined); // closes the listener prepared for it
        throw refused;
      }
    } finally {
      this.busy.delete(ctx.id);
    }
    const t1 = performance.now();
    const rows = await this.publish(ctx);
    const t2 = performance.now();
    this.opts.log.info(
      {
        workshop: ctx.id,
        simulators: specs.map((s) => s.name),
        // Before the start (checks, rows), the start itself, then publishing (and reading the rows back).
        beforeMs: Math.round(t0 - tEnter),
        startMs: Math.round(t1 - t0),
        publishMs: Math.round(t2 - t1),
        phases,
        live,
      },
      'simulators started',
    );
    for (const [name, p] of Object.entries(phases)) {
      if (p.waitedForCopyMs !== undefined)
        this.opts.log.warn(
          { workshop: ctx.id, simulator: name, waitedForCopyMs: p.waitedForCopyMs },
          'no spare copy of the postgres template was ready (a burst of starts): this start waited for one; the pool now keeps more for a while',
        );
    }
    return rows.filter((r) => specs.some((s) => s.name === r.name)).map((r) => this.view(r));
  }

  private async launch(
    workshopId: string,
    spec: SimulatorSpec,
    restarted = false,
    live = false,
    timings?: StartTimings,
  ): Promise<AtelierError | undefined> {
    try {
      const handle = await startSimulator(spec, timings);
      const t = performance.now();
      await queryRows(
        this.pool,
        `UPDATE workshop_simulators SET handle = $3, status = 'Running', updated_at = now(),
           status_reason = $4, restarts = restarts + $5 WHERE workshop_id = $1 AND name = $2`,
        [
          workshopId,
          spec.name,
          JSON.stringify(handle),
          restarted ? `restarted by the server at ${new Date().toISOString()} after its process ended (its data was reset)` : null,
          restarted ? 1 : 0,
        ],
      );
      if (timings) timings.recordMs = Math.round(performance.now() - t);
    } catch (err) {
      if (live && err instanceof AtelierError && err.code !== 'UNAVAILABLE') {
        await queryRows(this.pool, 'DELETE FROM workshop_simulators WHERE workshop_id = $1 AND name = $2', [workshopId, spec.name]);
        return err;
      }
      const reason = err instanceof Error ? err.message.split('\n')[0]! : String(err);
      this.opts.log.warn({ workshop: workshopId, simulator: spec.name, err: reason }, 'simulator failed to start');
      await queryRows(
        this.pool,
        "UPDATE workshop_simulators SET status = 'Failed', status_reason = $3, handle = NULL, updated_at = now() WHERE workshop_id = $1 AND name = $2",
        [workshopId, spec.name, reason],
      ).catch(() => undefined);
    }
    return undefined;
  }

  async logs(workshopId: string, name: string, tailBytes?: number): Promise<string> {
    const r = await this.one(workshopId, name);
    if (!r.handle) return r.status_reason ?? '';
    return simulatorLogs(r.handle, tailBytes === undefined ? {} : { tailBytes });
  }

  /** Back to its initial state (fresh database, empty keys…); a Failed one is started again. */
  async reset(ctx: WorkshopContext, name: string): Promise<SimulatorView> {
    const r = await this.one(ctx.id, name);
    this.busy.add(ctx.id);
    try {
      if (r.handle) {
        const handle = await resetSimulator(r.handle, { sandbox: simulatorSandboxArgv });
        await queryRows(
          this.pool,
          "UPDATE workshop_simulators SET handle = $3, status = 'Running', status_reason = NULL, updated_at = now() WHERE workshop_id = $1 AND name = $2",
          [ctx.id, name, JSON.stringify(handle)],
        );
      } else {
        const spec = this.resolve(ctx, r.request);
        rmSync(spec.dir, { recursive: true, force: true });
        await this.launch(ctx.id, spec);
      }
    } finally {
      this.busy.delete(ctx.id);
    }
    await this.publish(ctx);
    return this.view(await this.one(ctx.id, name));
  }

  /**
   * Stops one simulator (its process group ends, its files stay) and unpublishes it: its name and
   * variables leave the workshop. It stays Stopped (the watchdog and a resume leave it) until a
   * reset starts it again, with fresh state. Stopping a stopped one changes nothing.
   */
  async stop(ctx: WorkshopContext, name: string, by: string): Promise<SimulatorView> {
    const r = await this.one(ctx.id, name);
    if (r.status === 'Stopped') return this.view(r);
    this.busy.add(ctx.id);
    try {
      if (r.handle) await stopSimulator(r.handle);
      await queryRows(
        this.pool,
        "UPDATE workshop_simulators SET status = 'Stopped', status_reason = $3, updated_at = now() WHERE workshop_id = $1 AND name = $2",
        [ctx.id, name, `stopped by ${by} at ${new Date().toISOString()}: \`atelier simulators reset ${ctx.id} ${name}\` starts it again`],
      );
    } finally {
      this.busy.delete(ctx.id);
    }
    await this.publish(ctx);
    return this.view(await this.one(ctx.id, name));
  }

  /** Stops every simulator of the workshop and removes their files (delete, failed build). */
  async removeAll(workshopId: string): Promise<void> {
    this.busy.add(workshopId);
    try {
      for (const r of await this.rows(workshopId)) {
        if (!r.handle) continue;
        await removeSimulator(r.handle);
        rmSync(join(dirname(r.handle.dir), '.sock'), { recursive: true, force: true });
      }
      rmSync(this.legacyDir(workshopId), { recursive: true, force: true });
      await queryRows(this.pool, 'DELETE FROM workshop_simulators WHERE workshop_id = $1', [workshopId]);
      this.envs.delete(workshopId);
      const run = this.awsRunDirs.get(workshopId);
      if (run !== undefined) writeAwsConfig(run, undefined);
      this.awsRunDirs.delete(workshopId);
      this.opts.internal.close(workshopId);
    } finally {
      this.busy.delete(workshopId);
    }
  }

  /** Stops the processes (files kept) when the workshop's sandbox is stopped. */
  async stopAll(workshopId: string): Promise<void> {
    for (const r of await this.rows(workshopId)) if (r.handle) await stopSimulator(r.handle).catch(() => undefined);
  }

  /**
   * After a server start, or a sandbox started afresh: simulators whose process is still the one
   * started are kept; the others are started again (fresh state, said in their status).
   */
  async recover(ctx: WorkshopContext): Promise<void> {
    this.busy.add(ctx.id);
    try {
      for (const r of await this.rows(ctx.id)) {
        // A Failed one waits for a reset, a Stopped one for its reset or start by hand.
        if (r.status === 'Failed' || r.status === 'Stopped') continue;
        if (r.handle && isAlive(r.handle)) continue;
        await this.relaunch(ctx, r);
      }
    } finally {
      this.busy.delete(ctx.id);
    }
    await this.publish(ctx);
  }

  private async relaunch(ctx: WorkshopContext, r: SimRow): Promise<void> {
    let spec: SimulatorSpec;
    try {
      spec = this.resolve(ctx, r.request);
    } catch (err) {
      await queryRows(
        this.pool,
        "UPDATE workshop_simulators SET status = 'Failed', status_reason = $3, handle = NULL WHERE workshop_id = $1 AND name = $2",
        [ctx.id, r.name, (err as Error).message],
      );
      return;
    }
    if (r.handle) await removeSimulator(r.handle).catch(() => undefined);
    await this.launch(ctx.id, spec, true);
  }

  /**
   * Every few seconds: a simulator whose process ended (crash, OOM) is started again and its
   * status says so. `contexts` gives the running, unsuspended workshops.
   */
  startWatchdog(contexts: () => Promise<WorkshopContext[]>, everyMs = 2000): void {
    let running = false;
    this.watchdog = setInterval(() => {
      if (running) return;
      running = true;
      void (async () => {
        for (const ctx of await contexts()) {
          if (this.busy.has(ctx.id)) continue;
          const rows = await this.rows(ctx.id);
          const dead = rows.filter((r) => r.status === 'Running' && r.handle && !isAlive(r.handle));
          if (dead.length === 0) continue;
          this.busy.add(ctx.id);
          try {
            for (const r of dead) {
              this.opts.log.warn({ workshop: ctx.id, simulator: r.name }, 'simulator process ended: restarting it');
              await this.relaunch(ctx, r);
            }
            await this.publish(ctx);
          } finally {
            this.busy.delete(ctx.id);
          }
        }
      })()
        .catch((err: unknown) => this.opts.log.error({ err: String(err) }, 'simulator watchdog failed'))
        .finally(() => {
          running = false;
        });
    }, everyMs);
    this.watchdog.unref();
  }

  stopWatchdog(): void {
    if (this.watchdog) clearInterval(this.watchdog);
  }
}
