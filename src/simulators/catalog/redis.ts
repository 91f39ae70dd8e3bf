import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { AtelierError } from '../../core/index.js';
import { chownTree, run, SIMULATOR_ENV } from '../process.js';
import { respCommand } from '../resp.js';
import type { SimulatorSpec } from '../types.js';
import { checkKeys, checkSocketPath, findProgram, requestedMajor, SANDBOX_SOCKETS, type CatalogEntry, type VersionAsked } from './entry.js';

/**
 * Redis simulator: the system `redis-server` (apt `redis-server`), in memory only.
 *
 * It listens on `<socketDir>/<name>/redis.sock` and on no TCP port (`--port 0`), in a sandbox
 * of its own (lifecycle.ts); the workshop reaches it through the server's relay. Commands that
 * change where it writes or what it runs (CONFIG SET dir/dbfilename, MODULE LOAD, DEBUG) stay
 * disabled as well: whatever they did would stay in the sandbox, but nothing needs them.
 */

/** Its working directory inside the sandbox (where a SAVE would write). */
const SANDBOX_DATA = '/sim/data';

const PORT = 6379;
const SOCKET = 'redis.sock';

let installed: Promise<{ path: string; version: string } | undefined> | undefined;

function installation(): Promise<{ path: string; version: string } | undefined> {
  installed ??= (async () => {
    const path = findProgram('redis-server');
    if (!path) return undefined;
    const { stdout } = await run(path, ['--version'], { env: SIMULATOR_ENV });
    return { path, version: /v=(\d+(?:\.\d+)*)/.exec(stdout)?.[1] ?? 'unknown' };
  })();
  installed.catch(() => {
    installed = undefined;
  });
  return installed;
}

/** The version of redis-server for a check that cannot wait (an action's plan): read once, blocking that once (a few ms). */
let versionNow: string | undefined;

function checkMajor<T extends { version: string }>(spec: VersionAsked, found: T | undefined): asserts found is T {
  if (!found) {
    throw new AtelierError(
      'UNSUPPORTED',
      'redis-server is not installed on this server: install it with `apt-get install -y redis-server`',
      {
        type: 'redis',
      },
    );
  }
  const major = requestedMajor(spec);
  if (major !== undefined && String(major) !== found.version.split('.')[0]) {
    throw new AtelierError(
      'UNSUPPORTED',
      `Redis ${spec.version} is not installed on this server; installed: ${found.version}. Ask for version "${found.version.split('.')[0]}" or leave the version out`,
      { field: 'version', requested: spec.version, installed: [found.version] },
    );
  }
}

async function resolveInstallation(spec: SimulatorSpec): Promise<{ path: string; version: string }> {
  const found = await installation();
  checkMajor(spec, found);
  return found;
}

export const redis: CatalogEntry = {
  port: PORT,
  // Redis saves nothing on SIGTERM when no save point is configured (--save "").
  stopSignal: 'SIGTERM',
  envKeys: [],
  optionKeys: [],

  checkVersion(spec) {
    if (versionNow === undefined) {
      const path = findProgram('redis-server');
      const out = path ? execFileSync(path, ['--version'], { env: SIMULATOR_ENV, encoding: 'utf8' }) : undefined;
      if (out !== undefined) versionNow = /v=(\d+(?:\.\d+)*)/.exec(out)?.[1] ?? 'unknown';
    }
    checkMajor(spec, versionNow === undefined ? undefined : { version: versionNow });
  },

  async prepare(spec, sockDir) {
    checkKeys(spec, redis.envKeys, redis.optionKeys);
    const found = await resolveInstallation(spec);
    checkSocketPath(join(sockDir, SOCKET));
    mkdirSync(spec.dir, { recursive: true, mode: 0o711 });
    chmodSync(spec.dir, 0o711);
    // Its working directory (where a SAVE command would write): fresh at each start.
    const data = join(spec.dir, 'data');
    rmSync(data, { recursive: true, force: true });
    mkdirSync(data, { mode: 0o700 });
    await chownTree(data, spec.runAs);
    const host = `${spec.name}.atelier.internal`;
    return {
      type: 'redis',
      name: spec.name,
      version: found.version,
      dir: spec.dir,
      socketDir: spec.socketDir,
      socket: join(sockDir, SOCKET),
      socketName: `${spec.name}/${SOCKET}`,
      cacheDir: spec.cacheDir,
      runAs: spec.runAs,
      logFile: join(spec.dir, 'redis.log'),
      endpoint: { host, port: PORT },
      env: { REDIS_URL: `redis://${host}:${PORT}`, REDIS_HOST: host, REDIS_PORT: String(PORT) },
      settings: { program: found.path },
    };
  },

  command(instance) {
    const argv = [
      instance.settings.program!,
      '--port',
      '0',
      '--unixsocket',
      `${SANDBOX_SOCKETS}/${SOCKET}`,
      // Its owner only (the server's relay dials it as root or as that owner); the directory is closed too.
      '--unixsocketperm',
      '700',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      SANDBOX_DATA,
      '--daemonize',
      'no',
      '--enable-protected-configs',
      'no',
      '--enable-debug-command',
      'no',
      '--enable-module-command',
      'no',
    ];
    return { argv, mounts: [{ src: join(instance.dir, 'data'), dest: SANDBOX_DATA, writable: true }], cwd: SANDBOX_DATA };
  },

  async probe(handle) {
    const reply = await respCommand(handle.socket, ['PING']);
    if (reply !== 'PONG') throw new Error(`PING answered ${String(reply)}`);
  },

  async initialise() {
    // Nothing to create: an empty Redis is the initial state.
  },

  async resetInPlace(handle) {
    // FLUSHALL leaves Lua scripts and Redis 7 functions behind: clear them too.
    for (const command of [['FLUSHALL'], ['FUNCTION', 'FLUSH'], ['SCRIPT', 'FLUSH']]) {
      const reply = await respCommand(handle.socket, command);
      if (reply !== 'OK')
        throw new AtelierError('UNAVAILABLE', `redis simulator ${handle.name}: ${command.join(' ')} answered ${String(reply)}`, {
          name: handle.name,
        });
    }
  },
};
