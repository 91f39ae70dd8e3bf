import { assertSocket } from '../socketGuard.js';
import {
  chmodSync,
  closeSync,
  constants as fsConstants,
  existsSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { basename, dirname, isAbsolute, join } from 'node:path';
import { AtelierError } from '../../core/index.js';
import { chownTree, run, SIMULATOR_ENV } from '../process.js';
import type { SimulatorHandle } from '../types.js';
import {
  checkKeys,
  checkSocketPath,
  invalid,
  requestedMajor,
  SANDBOX_SOCKETS,
  type CatalogEntry,
  type SimulatorInstance,
  type VersionAsked,
} from './entry.js';

/**
 * `wiremock` simulator: the real WireMock standalone jar (shipped by the npm package
 * `wiremock`), run by the system Java in the simulator's sandbox (lifecycle.ts).
 *
 * Where it listens: Jetty cannot listen on a unix socket, so it binds 127.0.0.1:8080 of its
 * sandbox's own network namespace (a loopback nothing else shares), and `socat`, in the same
 * sandbox, bridges `<socketDir>/<name>/http.sock` to it: the server's relay and admin calls
 * dial that socket, as for every other simulator.
 *
 * Stubs: `stubsDirectory` (a WireMock root: `mappings/`, `__files/`) is copied into the
 * instance directory at each start and reset, regular files only, after every mapping file was
 * parsed: a link out of the workspace is refused, never followed. A reset copies the stubs again
 * (edits made in the workspace since are picked up) and POSTs `/__admin/reset`: stubs reloaded,
 * request journal and scenarios cleared.
 *
 * What WireMock could reach stays in its sandbox (only its stubs copy is writable, /tmp is
 * private, the network has no way out), and is switched off as well: proxying and webhooks to
 * any address (`--deny-proxy-targets` everything, IPv6 disabled in the JVM so no address escapes
 * the list), templates reading the JVM's properties or environment, browser proxying.
 */

const PORT = 8080;
const JAVA = '/usr/bin/java';
const SOCAT = '/usr/bin/socat';
const STUBS = 'root';
const SOCKET = 'http.sock';
/** Inside the sandbox: the stubs copy (writable: the admin API saves there), the jar's folder (read-only). */
const SANDBOX_STUBS = '/sim/root';
const SANDBOX_JAR = '/opt/wiremock';
/** What one copy of the stubs may hold: they are copied at every start and reset. */
const MAX_STUB_BYTES = 256 * 2 ** 20;
const MAX_STUB_FILES = 10_000;
/** Every IPv4 address and every name: no stub may make the host's JVM open a connection. */
const DENY_ALL = '0.0.0.0-255.255.255.255,*';

const require = createRequire(import.meta.url);

interface Installation {
  jar: string;
  version: string;
}

let installed: Installation | undefined;

function installation(): Installation {
  if (installed) return installed;
  let pkgFile: string;
  try {
    pkgFile = require.resolve('wiremock/package.json');
  } catch {
    throw new AtelierError('UNSUPPORTED', "the npm package wiremock is not installed: run `npm ci` in Atelier's directory", {
      type: 'wiremock',
    });
  }
  const version = (JSON.parse(readFileSync(pkgFile, 'utf8')) as { version: string }).version;
  const jar = join(dirname(pkgFile), 'build', `wiremock-standalone-${version}.jar`);
  if (!existsSync(jar))
    throw new AtelierError('UNSUPPORTED', `the WireMock jar ${jar} is missing: run \`npm ci\` in Atelier's directory`, {
      type: 'wiremock',
    });
  installed = { jar, version };
  return installed;
}

let javaChecked: Promise<void> | undefined;

function checkJava(): Promise<void> {
  javaChecked ??= (async () => {
    if (!existsSync(JAVA)) throw new Error('missing');
    await run(JAVA, ['-version'], { env: SIMULATOR_ENV });
  })();
  return javaChecked.catch(() => {
    javaChecked = undefined;
    throw new AtelierError(
      'UNSUPPORTED',
      `the wiremock simulator needs Java 11 or later at ${JAVA}: install it with \`apt-get install -y openjdk-17-jre-headless\``,
      { type: 'wiremock' },
    );
  });
}

function checkVersion(spec: VersionAsked, inst: Installation): void {
  const major = requestedMajor(spec);
  if (major !== undefined && String(major) !== inst.version.split('.')[0]) {
    throw new AtelierError(
      'UNSUPPORTED',
      `WireMock ${spec.version} is not installed on this server; installed: ${inst.version}. Ask for version "${inst.version.split('.')[0]}" or leave the version out`,
      { field: 'version', requested: spec.version, installed: [inst.version] },
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Stubs: checked, then copied.

function bad(spec: { name: string }, message: string, file?: string): AtelierError {
  return invalid(`wiremock simulator ${spec.name}: ${message}`, { field: 'stubsDirectory', ...(file ? { file } : {}) });
}

/**
 * Opens `name` in the directory open as `dirFd` without following a link at any step: the path
 * goes through `/proc/self/fd/<dirFd>` (the very directory opened, whatever its path has become
 * since: openat's semantics), O_NOFOLLOW refuses a link as the last step, O_NONBLOCK keeps a FIFO
 * from blocking the server's event loop, O_NOCTTY a terminal from becoming its own. The caller
 * fstats the fd: only what it expects (a regular file, a directory) is used.
 */
function openIn(dirFd: number, name: string, flags: number): number {
  const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = fsConstants;
  return openSync(`/proc/self/fd/${dirFd}/${name}`, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | flags);
}

/**
 * Opens the stubs directory itself, `root` (the real path it had when the simulator was created,
 * inside its workspace), refusing it unless it still is that very path: no component of it may
 * have become a link since (realpath before the open, the opened directory's own path after it:
 * a parent swapped for a link in between shows as another path). Checked at every start and
 * reset, not only at creation.
 */
function openStubsRoot(spec: { name: string }, root: string): number {
  if (!isAbsolute(root)) throw bad(spec, `stubsDirectory ${root} must be an absolute path`);
  let real: string;
  try {
    real = realpathSync(root);
  } catch {
    throw bad(spec, `the stubs directory ${root} does not exist: create it with a mappings/ folder, or leave stubsDirectory out`);
  }
  if (real !== root) throw bad(spec, `the stubs directory ${root} has become a link (to ${real}): stubs are read from the repository only`);
  let fd: number;
  try {
    fd = openSync(root, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch {
    throw bad(spec, `the stubs directory ${root} is not a directory`);
  }
  try {
    if (readlinkSync(`/proc/self/fd/${fd}`) !== root) throw bad(spec, `the stubs directory ${root} moved while it was opened: try again`);
    if (!fstatSync(fd).isDirectory()) throw bad(spec, `the stubs directory ${root} is not a directory`);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return fd;
}

const CHUNK = 1 << 16;

/**
 * Checks and copies a WireMock root in one pass, never through a link and never blocking:
 * every entry is opened relative to its parent's fd (openIn), fstat'ed (regular files and
 * directories only: links, FIFOs, sockets, devices are refused, naming them), and what is
 * copied is what was read from that fd, so nothing can be swapped between the check and the
 * copy. JSON files under mappings/ must parse as stub mappings; the whole stays under
 * MAX_STUB_FILES files and MAX_STUB_BYTES bytes (counted as read, not as stat'ed). With no
 * `to`, only checks.
 */
function copyStubsSafely(spec: { name: string }, root: string, to: string | undefined): void {
  const rootFd = openStubsRoot(spec, root);
  let bytes = 0;
  let files = 0;
  const tooBig = (): AtelierError =>
    bad(
      spec,
      `the stubs directory ${root} holds more than ${MAX_STUB_FILES} files or ${MAX_STUB_BYTES / 2 ** 20} MiB: it is copied at each start and reset, keep only the stubs there`,
    );
  const refuse = (rel: string, what: string): AtelierError =>
    bad(spec, `${rel} in ${root} is a ${what}: stubs are copied as regular files only, replace it with the file itself`, rel);
  const copyFile = (fd: number, rel: string, dst: string | undefined, keep: boolean): Buffer | undefined => {
    const kept: Buffer[] = [];
    const out = dst === undefined ? undefined : openSync(dst, 'wx', 0o600);
    try {
      const buf = Buffer.allocUnsafe(CHUNK);
      for (;;) {
        let n: number;
        try {
          n = readSync(fd, buf, 0, CHUNK, null);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EAGAIN') throw refuse(rel, 'special file');
          throw err;
        }
        if (n === 0) break;
        bytes += n;
        if (bytes > MAX_STUB_BYTES) throw tooBig();
        if (out !== undefined) writeSync(out, buf, 0, n);
        if (keep) kept.push(Buffer.from(buf.subarray(0, n)));
      }
    } finally {
      if (out !== undefined) closeSync(out);
    }
    return keep ? Buffer.concat(kept) : undefined;
  };
  const walk = (dirFd: number, rel: string, dst: string | undefined, inMappings: boolean): void => {
    if (dst !== undefined) mkdirSync(dst, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(`/proc/self/fd/${dirFd}`, { withFileTypes: true })) {
      const relPath = rel ? `${rel}/${entry.name}` : entry.name;
      let fd: number;
      try {
        fd = openIn(dirFd, entry.name, 0);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ELOOP' || code === 'EMLINK') throw refuse(relPath, 'symbolic link');
        if (code === 'ENXIO' || code === 'EOPNOTSUPP') throw refuse(relPath, 'special file');
        throw bad(spec, `${relPath} in ${root} cannot be read (${code ?? (err as Error).message})`, relPath);
      }
      try {
        const st = fstatSync(fd);
        const childDst = dst === undefined ? undefined : join(dst, entry.name);
        if (st.isDirectory()) walk(fd, relPath, childDst, inMappings || (rel === '' && entry.name === 'mappings'));
        else if (st.isFile()) {
          if (++files > MAX_STUB_FILES) throw tooBig();
          const isMapping = inMappings && entry.name.toLowerCase().endsWith('.json');
          const content = copyFile(fd, relPath, childDst, isMapping);
          if (content) checkMapping(spec, relPath, content);
        } else throw refuse(relPath, 'special file');
      } finally {
        closeSync(fd);
      }
    }
  };
  try {
    const names = readdirSync(`/proc/self/fd/${rootFd}`);
    if (!names.includes('mappings') && !names.includes('__files')) {
      throw bad(spec, `${root} has neither a mappings/ nor a __files/ folder: put the stub mappings (JSON) in ${join(root, 'mappings')}/`);
    }
    walk(rootFd, '', to, false);
  } finally {
    closeSync(rootFd);
  }
}

/** Checks that `root` is a WireMock root whose mapping files all parse; throws naming the first bad file. */
function checkStubs(spec: { name: string }, root: string): void {
  copyStubsSafely(spec, root, undefined);
}

function checkMapping(spec: { name: string }, name: string, content: Buffer): void {
  let doc: unknown;
  try {
    doc = JSON.parse(content.toString('utf8'));
  } catch (err) {
    throw bad(spec, `the mapping file ${name} is not valid JSON (${(err as Error).message}): fix it or remove it`, name);
  }
  const isMapping = (m: unknown): boolean =>
    typeof m === 'object' && m !== null && !Array.isArray(m) && typeof (m as { request?: unknown }).request === 'object';
  const ok =
    typeof doc === 'object' && doc !== null && 'mappings' in doc
      ? Array.isArray((doc as { mappings: unknown }).mappings) && (doc as { mappings: unknown[] }).mappings.every(isMapping)
      : isMapping(doc);
  if (!ok) {
    throw bad(
      spec,
      `the mapping file ${name} is not a WireMock stub mapping: it must be an object with "request" and "response", or {"mappings": [ … ]} of them`,
      name,
    );
  }
}

/** Puts a fresh copy of the stubs (or an empty root) at `<dir>/root`, owned by the simulator's user. */
async function placeStubs(instance: Pick<SimulatorInstance, 'name' | 'dir' | 'runAs' | 'settings'>): Promise<void> {
  const target = join(instance.dir, STUBS);
  const next = `${target}.next`;
  rmSync(next, { recursive: true, force: true });
  const source = instance.settings.stubsDirectory;
  try {
    if (source) {
      copyStubsSafely(instance, source, next);
    }
    for (const sub of ['mappings', '__files']) mkdirSync(join(next, sub), { recursive: true, mode: 0o700 });
    await chownTree(next, instance.runAs);
    chmodSync(next, 0o700);
  } catch (err) {
    rmSync(next, { recursive: true, force: true });
    throw err;
  }
  // A failed copy leaves the stubs in use as they were. The JVM's mount namespace binds the
  // directory itself: its contents are replaced, never the directory.
  if (!existsSync(target)) {
    renameSync(next, target);
    return;
  }
  // The stubs in use are WireMock's to change (it runs as the workshop's uid, and may swap a
  // directory for a link at any moment): GNU rm removes them, which walks with fd-relative calls
  // and never follows a link (Node's recursive rmSync checks, then acts, by path).
  const old = readdirSync(target).map((entry) => join(target, entry));
  if (old.length > 0) await run('/bin/rm', ['-rf', '--one-file-system', '--', ...old], { env: SIMULATOR_ENV });
  for (const entry of readdirSync(next)) renameSync(join(next, entry), join(target, entry));
  rmSync(next, { recursive: true, force: true });
}

/** The JRE's real path (/usr/bin/java is a chain of links through /etc/alternatives, not shown in the sandbox). */
function javaHome(): { java: string; conf: string[] } {
  const java = realpathSync(JAVA);
  // Debian's JRE keeps its configuration in /etc/java-<major>-openjdk, linked from its conf/.
  const conf: string[] = [];
  const confDir = join(dirname(dirname(java)), 'conf');
  try {
    for (const e of readdirSync(confDir)) {
      const p = join(confDir, e);
      if (lstatSync(p).isSymbolicLink()) {
        const target = readlinkSync(p);
        const etc = /^(\/etc\/[^/]+)\//.exec(target)?.[1];
        if (etc && !conf.includes(etc)) conf.push(etc);
      }
    }
  } catch {
    // no conf/ folder: nothing to show
  }
  return { java, conf };
}

function admin(handle: SimulatorHandle, method: string, path: string): Promise<{ status: number; body: string }> {
  // Handles recorded before simulators were sandboxed listened on a host loopback port.
  const target = handle.tcp ? { host: '127.0.0.1', port: handle.tcp.port } : { socketPath: handle.socket };
  try {
    if (!handle.tcp) assertSocket(handle.socket);
  } catch (err) {
    return Promise.reject(err as Error);
  }
  return new Promise((resolve, reject) => {
    const req = request({ ...target, method, path, timeout: 2000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 2 s')));
    req.on('error', reject);
    req.end();
  });
}

export const wiremock: CatalogEntry = {
  port: PORT,
  stopSignal: 'SIGTERM',
  // ~1.5–2 s on an idle machine; a JVM's start stretches far more than a C server's under load.
  startTimeoutMs: 60_000,
  envKeys: [],
  optionKeys: [],

  checkVersion(spec) {
    checkVersion(spec, installation());
  },

  async prepare(spec, sockDir) {
    checkKeys(spec, wiremock.envKeys, wiremock.optionKeys);
    const inst = installation();
    checkVersion(spec, inst);
    if (spec.stubsDirectory !== undefined) checkStubs(spec, spec.stubsDirectory);
    await checkJava();
    if (!existsSync(SOCAT)) {
      throw new AtelierError(
        'UNSUPPORTED',
        `the wiremock simulator needs socat at ${SOCAT} (it bridges WireMock's port to its socket): install it with \`apt-get install -y socat\``,
        { type: 'wiremock' },
      );
    }
    checkSocketPath(join(sockDir, SOCKET));
    mkdirSync(spec.dir, { recursive: true, mode: 0o711 });
    chmodSync(spec.dir, 0o711);
    // Its temporary files are in the sandbox's private /tmp now (older instances had a tmp/ here).
    rmSync(join(spec.dir, 'tmp'), { recursive: true, force: true });
    const host = `${spec.name}.atelier.internal`;
    const instance: SimulatorInstance = {
      type: 'wiremock',
      name: spec.name,
      version: inst.version,
      dir: spec.dir,
      socketDir: spec.socketDir,
      socket: join(sockDir, SOCKET),
      socketName: `${spec.name}/${SOCKET}`,
      cacheDir: spec.cacheDir,
      runAs: spec.runAs,
      logFile: join(spec.dir, 'wiremock.log'),
      endpoint: { host, port: PORT },
      env: { WIREMOCK_URL: `http://${host}:${PORT}`, WIREMOCK_HOST: host, WIREMOCK_PORT: String(PORT) },
      settings: { jar: inst.jar, ...(spec.stubsDirectory !== undefined ? { stubsDirectory: spec.stubsDirectory } : {}) },
    };
    await placeStubs(instance);
    return instance;
  },

  command(instance) {
    const { java, conf } = javaHome();
    const jar = instance.settings.jar!;
    const javaArgv = [
      java,
      // A small heap and the quick JIT: a mock server, started often, serving little.
      '-Xms32m',
      '-Xmx256m',
      '-XX:+UseSerialGC',
      '-XX:TieredStopAtLevel=1',
      '-Xshare:auto',
      '-XX:-UsePerfData',
      // Without IPv6 no address can slip past the IPv4 deny list below.
      '-Djava.net.preferIPv4Stack=true',
      '-Djava.io.tmpdir=/tmp',
      '-jar',
      `${SANDBOX_JAR}/${basename(jar)}`,
      '--bind-address',
      '127.0.0.1',
      '--port',
      String(PORT),
      '--root-dir',
      SANDBOX_STUBS,
      '--disable-banner',
      '--deny-proxy-targets',
      DENY_ALL,
      '--permitted-system-keys',
      'wiremock\\..*',
      '--max-request-journal-entries',
      '10000',
    ];
    // socat bridges the socket to Jetty's port, in the background of the same sandbox; the JVM
    // is the sandbox's main process (when it ends, the sandbox and socat go with it).
    const bridge = `${SOCAT} UNIX-LISTEN:${SANDBOX_SOCKETS}/${SOCKET},fork,mode=600 TCP:127.0.0.1:${PORT} & exec "$@"`;
    return {
      argv: ['/bin/sh', '-c', bridge, 'sh', ...javaArgv],
      mounts: [
        { src: dirname(jar), dest: SANDBOX_JAR },
        ...conf.map((dir) => ({ src: dir, dest: dir })),
        { src: join(instance.dir, STUBS), dest: SANDBOX_STUBS, writable: true },
      ],
    };
  },

  async probe(handle) {
    const res = await admin(handle, 'GET', '/__admin/health');
    if (res.status !== 200 || !/"status"\s*:\s*"healthy"/.test(res.body)) {
      throw new Error(`/__admin/health answered ${res.status}: ${res.body.slice(0, 200)}`);
    }
  },

  async initialise() {
    // The stubs were loaded from the root directory at start.
  },

  async resetInPlace(handle) {
    await placeStubs(handle);
    const res = await admin(handle, 'POST', '/__admin/reset');
    if (res.status !== 200) {
      throw new AtelierError(
        'UNAVAILABLE',
        `wiremock simulator ${handle.name}: /__admin/reset answered ${res.status}: ${res.body.slice(0, 200)}`,
        {
          name: handle.name,
        },
      );
    }
  },

  async refresh(instance) {
    // A handle of an older server listened on a host port: this restart uses the socket.
    delete instance.tcp;
    await placeStubs(instance);
  },
};
