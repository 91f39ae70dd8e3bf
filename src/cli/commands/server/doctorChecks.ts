import { execFile } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces, totalmem } from 'node:os';
import { dirname, resolve } from 'node:path';
import { formatSize, parseListen, type Config } from '../../../core/index.js';

/** One pre-flight check: `fix` says what to do for a warn or a fail; `skip` is a check that does not apply here. */
export interface DoctorCheck {
  name: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
  fix?: string;
  ms: number;
}

export interface DoctorOptions {
  dataDir: string;
  /** HOST:PORT the server is to listen on. */
  listen: string;
  domain?: string;
  databaseUrl?: string;
}

type Outcome = Omit<DoctorCheck, 'name' | 'ms'>;

const GiB = 2 ** 30;
const RECOMMENDED_MEMORY = 8 * GiB;
const MINIMUM_MEMORY = 2 * GiB;
const COMFORTABLE_DISK = 20 * GiB;

function ok(detail: string): Outcome {
  return { status: 'ok', detail };
}
function warn(detail: string, fix: string): Outcome {
  return { status: 'warn', detail, fix };
}
function fail(detail: string, fix: string): Outcome {
  return { status: 'fail', detail, fix };
}
function skip(detail: string): Outcome {
  return { status: 'skip', detail };
}

/** Runs a program; never throws: the exit code (null when it could not start), its output and error. */
function run(cmd: string, args: string[], timeoutMs = 10_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
      done({ code, stdout: stdout ?? '', stderr: (stderr || (err && code === null ? err.message : '')) ?? '' });
    });
  });
}

/** Where `name` is on the PATH (as a shell finds it), or /usr/sbin (outside an ordinary user's PATH). */
async function which(name: string): Promise<string | undefined> {
  const r = await run('sh', ['-c', `command -v ${name}`]);
  if (r.code === 0 && r.stdout.trim()) return r.stdout.trim();
  return existsSync(`/usr/sbin/${name}`) ? `/usr/sbin/${name}` : undefined;
}

/** The nearest directory of `path` that exists (a data dir not made yet is measured on its parent's filesystem). */
function existingAncestor(path: string): string {
  let p = resolve(path);
  while (!existsSync(p) && dirname(p) !== p) p = dirname(p);
  return p;
}

/** The pid of the server holding this data dir's lock, if it is alive. */
export function runningServerPid(dataDir: string): number | undefined {
  try {
    const [pid, start] = readFileSync(`${dataDir}/server.pid`, 'utf8').trim().split(' ');
    const n = Number(pid);
    if (!(n > 0) || start === undefined) return undefined;
    // Field 22 of /proc/PID/stat (after the command in parentheses) is the start time the lock names.
    const stat = readFileSync(`/proc/${n}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] === start ? n : undefined;
  } catch {
    return undefined;
  }
}

function arch(): Outcome {
  if (process.arch === 'x64') return ok('x86_64');
  if (process.arch === 'arm64')
    return warn('aarch64: the server runs, but the system-call filter exists for x86_64 only so far', 'run Atelier on an x86_64 host');
  return fail(`${process.arch}: Atelier runs on x86_64 (and aarch64)`, 'run Atelier on an x86_64 or aarch64 host');
}

// KVM_GET_API_VERSION is _IO(KVMIO=0xAE, 0x00); Node has no ioctl(), python3 (a required tool) has.
const KVM_PROBE = `
import os, fcntl, sys
try:
    fd = os.open('/dev/kvm', os.O_RDWR | os.O_CLOEXEC)
    print(fcntl.ioctl(fd, 0xAE00))
except OSError as e:
    print('error %d %s' % (e.errno, e.strerror))
`;

async function kvm(): Promise<Outcome> {
  const later = 'workshops run in bubblewrap sandboxes today, microVM isolation will need it';
  if (!existsSync('/dev/kvm'))
    return warn(
      `no /dev/kvm (${later})`,
      'enable virtualization (VT-x/AMD-V) in the firmware, or nested virtualization for this VM, then `sudo modprobe kvm_intel` (or kvm_amd)',
    );
  const r = await run('/usr/bin/python3', ['-I', '-S', '-c', KVM_PROBE]);
  const out = r.stdout.trim();
  if (r.code === null)
    return skip(`/dev/kvm exists; the KVM_GET_API_VERSION ioctl was not tried: ${r.stderr.trim() || 'python3 did not run'}`);
  if (/^\d+$/.test(out)) {
    return out === '12'
      ? ok(`/dev/kvm opened, KVM API version ${out}`)
      : warn(`/dev/kvm answers KVM API version ${out}, not 12`, 'update the kernel');
  }
  if (out.startsWith('error 13'))
    return warn(
      `/dev/kvm cannot be opened: permission denied (${later})`,
      'add the server user to the kvm group: `sudo usermod -aG kvm USER`',
    );
  return warn(
    `/dev/kvm does not answer KVM_GET_API_VERSION: ${out.replace(/^error \d+ /, '')} (${later})`,
    'check the kvm module: `sudo modprobe kvm_intel` (or kvm_amd)',
  );
}

function memory(config: Config): Outcome {
  const total = totalmem();
  const detail = `${formatSize(total)} (a workshop may use ${config.defaultMemory} by default)`;
  if (total >= RECOMMENDED_MEMORY * 0.95) return ok(detail);
  const fix = `give the machine ${formatSize(RECOMMENDED_MEMORY)} or more, or run fewer workshops at once`;
  if (total < MINIMUM_MEMORY) return fail(`${detail}: under ${formatSize(MINIMUM_MEMORY)}`, fix);
  return warn(`${detail}: ${formatSize(RECOMMENDED_MEMORY)} recommended`, fix);
}

async function disk(config: Config, dataDir: string): Promise<Outcome> {
  const { freeBytes } = await import('../../../sandbox/index.js');
  const at = existingAncestor(dataDir);
  const free = freeBytes(at);
  const need = config.diskReserveBytes + config.defaultDiskBytes;
  const detail = `${formatSize(free)} free under ${dataDir}${at !== resolve(dataDir) ? ` (on the filesystem of ${at})` : ''}`;
  const fix = `free space there, or give --data-dir on a larger filesystem`;
  if (free < need)
    return fail(
      `${detail}: less than one workshop's default disk (${formatSize(config.defaultDiskBytes)}) plus the ${formatSize(config.diskReserveBytes)} kept for the database`,
      fix,
    );
  if (free < COMFORTABLE_DISK) return warn(`${detail}: room for few workshops (${formatSize(COMFORTABLE_DISK)} or more recommended)`, fix);
  return ok(detail);
}

function tryListen(host: string, port: number): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((done) => {
    const s = createServer();
    s.once('error', (err: NodeJS.ErrnoException) => done(err));
    s.listen({ host, port, exclusive: true }, () => s.close(() => done(undefined)));
  });
}

async function port(host: string, portNumber: number, dataDir: string, why: string): Promise<Outcome> {
  const err = await tryListen(host, portNumber);
  const where = `${host.includes(':') ? `[${host}]` : host}:${portNumber}`;
  if (!err) return ok(`${where} is free (${why})`);
  if (err.code === 'EADDRINUSE') {
    const pid = runningServerPid(dataDir);
    if (pid !== undefined) return ok(`${where} is in use, by the Atelier server of ${dataDir} (pid ${pid})`);
    return fail(
      `${where} is in use by another program (${why})`,
      `find it with \`ss -ltnp 'sport = :${portNumber}'\` and stop it, or choose another address with --listen`,
    );
  }
  if (err.code === 'EACCES')
    return fail(
      `${where}: binding a port under 1024 needs root (${why})`,
      'run the server as root, or choose a port of 1024 or more with --listen',
    );
  if (err.code === 'EADDRNOTAVAIL')
    return fail(`${where}: ${host} is no address of this machine (${why})`, 'give --listen an address of this machine (ip -brief address)');
  return fail(`${where}: ${err.message} (${why})`, 'choose another address with --listen');
}

async function dns(domain: string | undefined): Promise<Outcome> {
  if (!domain) return skip('no --domain given');
  let addresses: string[];
  try {
    addresses = (await lookup(domain, { all: true })).map((a) => a.address);
  } catch (err) {
    return fail(
      `${domain} does not resolve: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      `create an A (and AAAA) record for ${domain} pointing to this machine's public address`,
    );
  }
  const own = new Set(
    Object.values(networkInterfaces())
      .flat()
      .map((i) => i?.address),
  );
  if (addresses.some((a) => own.has(a))) return ok(`${domain} resolves to ${addresses.join(', ')} (this machine)`);
  return warn(
    `${domain} resolves to ${addresses.join(', ')}, no address of this machine (fine behind NAT or a load balancer)`,
    `point ${domain} at this machine's public address, or check that the address forwards ports 80 and 443 here`,
  );
}

async function userNamespaces(isRoot: boolean): Promise<Outcome> {
  const r = await run('unshare', ['--user', '--map-root-user', 'true']);
  let max = '';
  try {
    max = readFileSync('/proc/sys/user/max_user_namespaces', 'utf8').trim();
  } catch {
    // not on this kernel
  }
  if (r.code === 0) return ok(`an unprivileged user namespace was created${max ? ` (user.max_user_namespaces ${max})` : ''}`);
  const detail = `cannot create a user namespace: ${r.stderr.trim() || `exit ${r.code}`}`;
  const fix =
    'allow them: `sudo sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1` (Ubuntu 24.04: also kernel.apparmor_restrict_unprivileged_userns=0)';
  return isRoot
    ? warn(`${detail} (a root server does without them; a rootless one needs them)`, fix)
    : fail(`${detail} (a rootless server needs them)`, fix);
}

async function bubblewrap(isRoot: boolean): Promise<Outcome> {
  const { INSTALL_TOOLS, missingTools } = await import('../../../sandbox/index.js');
  const missing = missingTools(isRoot);
  if (missing.length > 0) return fail(`missing system tools: ${missing.join(', ')}`, `run \`${INSTALL_TOOLS}\``);
  if (!isRoot) return ok('the rootless sandbox tools are installed (unshare, nsenter, setpriv, mount, ip…)');
  const version = (await run('bwrap', ['--version'])).stdout.trim();
  const r = await run('bwrap', ['--ro-bind', '/', '/', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--die-with-parent', 'true']);
  if (r.code !== 0)
    return fail(
      `${version || 'bwrap'} cannot make a sandbox here: ${r.stderr.trim() || `exit ${r.code}`}`,
      'run the server on a host (or a privileged container) that allows new namespaces',
    );
  return ok(`${version}: a sandbox with its own pid and network namespaces ran \`true\``);
}

async function cgroups(isRoot: boolean): Promise<Outcome> {
  if (!isRoot)
    return warn(
      'not root: no per-workshop memory, CPU or process limits and no suspend (freezer)',
      'run the server as root (sudo atelier server start)',
    );
  const { cgroupSupport } = await import('../../../sandbox/index.js');
  const cg = cgroupSupport();
  if (cg.ok) return ok('cgroup v1 controllers memory, cpu, pids and freezer are mounted');
  return warn(
    cg.reason ?? 'the cgroup controllers are missing',
    'mount the cgroup v1 controllers memory, cpu, pids and freezer under /sys/fs/cgroup (boot with systemd.unified_cgroup_hierarchy=0)',
  );
}

async function seccomp(): Promise<Outcome> {
  const { checkSeccomp } = await import('../../../sandbox/index.js');
  try {
    const f = checkSeccomp();
    return ok(`${f.profile} (${f.arch}): ${f.rules} rules loaded and \`true\` ran under them`);
  } catch (err) {
    // checkSeccomp's message says what to do (build it, or which kernel refuses it).
    return fail((err as Error).message, 'no workshop starts without the filter: fix what the message says, then run doctor again');
  }
}

async function diskQuotas(config: Config): Promise<Outcome> {
  if (!config.isRoot)
    return warn('not enforced: a rootless server cannot loop-mount a filesystem per workshop', 'run the server as root for disk quotas');
  if (!config.diskQuota) return warn('off (ATELIER_DISK_QUOTA=off): workshops can fill the data dir', 'unset ATELIER_DISK_QUOTA');
  const mkfs = await which('mkfs.ext4');
  if (!mkfs)
    return fail('mkfs.ext4 is not installed: each workshop gets an ext4 filesystem of its own', 'run `sudo apt-get install -y e2fsprogs`');
  if (!existsSync('/dev/loop-control'))
    return fail(
      'no loop devices (/dev/loop-control): each workshop disk is a loop-mounted image',
      'run `sudo modprobe loop`, or set ATELIER_DISK_QUOTA=off',
    );
  const r = await run('losetup', ['--find']);
  if (r.code !== 0)
    return fail(
      `no free loop device: ${r.stderr.trim() || `losetup exit ${r.code}`}`,
      'give this machine (container) access to loop devices, or set ATELIER_DISK_QUOTA=off',
    );
  return ok(`${mkfs} and loop devices (next free: ${r.stdout.trim()})`);
}

async function postgres(config: Config, databaseUrl: string | undefined): Promise<Outcome> {
  if (databaseUrl) {
    let host = '?';
    try {
      host = new URL(databaseUrl).host;
    } catch {
      return fail('--database-url is not a URL', 'give it as postgres://USER:PASSWORD@HOST:PORT/DATABASE');
    }
    return skip(`an external database at ${host} (its binaries are not needed here)`);
  }
  const { findPgBinDir } = await import('../../../db/index.js');
  let bin: string;
  try {
    bin = findPgBinDir(config.pgBinDir);
  } catch (err) {
    return fail((err as Error).message, 'run `sudo apt-get install -y postgresql`, or give --database-url');
  }
  const v = (await run(`${bin}/postgres`, ['--version'])).stdout.trim();
  if (config.isRoot && (await run('id', ['-u', 'postgres'])).code !== 0)
    return fail(
      `${v || bin}, but no \`postgres\` user: the embedded database runs as that user under a root server`,
      'run `sudo apt-get install -y postgresql` (it makes the user), or give --database-url',
    );
  return ok(`${v || 'postgres'} in ${bin}`);
}

async function simulators(): Promise<Outcome> {
  const { checkSimulatorVersion, SIMULATOR_TYPES } = await import('../../../simulators/index.js');
  const missing: string[] = [];
  const fixes: string[] = [];
  for (const type of SIMULATOR_TYPES) {
    try {
      checkSimulatorVersion({ type, name: 'doctor' });
    } catch (err) {
      missing.push(type);
      fixes.push((err as Error).message);
    }
  }
  if (missing.length === 0) return ok(`every simulator can run: ${SIMULATOR_TYPES.join(', ')} (java, redis-server, PostgreSQL found)`);
  const available = SIMULATOR_TYPES.filter((t) => !missing.includes(t));
  return warn(`unavailable: ${missing.join(', ')}${available.length ? `; available: ${available.join(', ')}` : ''}`, fixes.join('; '));
}

// adjtimex(2) with modes 0 only reads; it returns the clock state, TIME_ERROR (5) when the kernel's
// clock is not synchronized (no NTP daemon has disciplined it).
const CLOCK_PROBE = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(512)
print(libc.adjtimex(buf))
`;

async function clock(): Promise<Outcome> {
  const now = new Date();
  if (now.getUTCFullYear() < 2025) return fail(`the clock says ${now.toISOString()}`, 'set the time: `sudo apt-get install -y chrony`');
  const r = await run('/usr/bin/python3', ['-I', '-S', '-c', CLOCK_PROBE]);
  const state = Number(r.stdout.trim());
  if (r.code !== 0 || !Number.isInteger(state)) return skip(`${now.toISOString()}; the kernel's synchronization state could not be read`);
  if (state === 5)
    return warn(
      `${now.toISOString()}, not synchronized (the kernel says no NTP daemon keeps it): tokens, approvals and TLS certificates expire by it`,
      'run an NTP client: `sudo apt-get install -y chrony` (or enable systemd-timesyncd)',
    );
  return ok(`${now.toISOString()}, synchronized by NTP`);
}

async function timed(name: string, f: () => Outcome | Promise<Outcome>): Promise<DoctorCheck> {
  const t0 = performance.now();
  let out: Outcome;
  try {
    out = await f();
  } catch (err) {
    out = fail(
      `the check itself failed: ${(err as Error).message}`,
      'report this with the output of `atelier server doctor --output json`',
    );
  }
  return { name, ...out, ms: Math.round(performance.now() - t0) };
}

/** Every pre-flight check of `atelier server doctor`, run at once, in a fixed order. */
export async function preflightChecks(config: Config, o: DoctorOptions): Promise<DoctorCheck[]> {
  const { host, port: listenPort } = parseListen(o.listen);
  const ports: [string, () => Promise<Outcome>][] = [[`port ${listenPort}`, () => port(host, listenPort, o.dataDir, '--listen')]];
  if (o.domain) {
    for (const p of [80, 443])
      if (p !== listenPort) ports.push([`port ${p}`, () => port('0.0.0.0', p, o.dataDir, `HTTP${p === 443 ? 'S' : ''} for ${o.domain}`)]);
  }
  return Promise.all([
    timed('architecture', arch),
    timed('kvm', kvm),
    timed('memory', () => memory(config)),
    timed('disk', () => disk(config, o.dataDir)),
    ...ports.map(([name, f]) => timed(name, f)),
    timed('dns', () => dns(o.domain)),
    timed('user namespaces', () => userNamespaces(config.isRoot)),
    timed('bubblewrap', () => bubblewrap(config.isRoot)),
    timed('cgroups', () => cgroups(config.isRoot)),
    timed('system-call filter', seccomp),
    timed('disk quotas', () => diskQuotas(config)),
    timed('postgresql', () => postgres(config, o.databaseUrl)),
    timed('simulators', simulators),
    timed('clock', clock),
  ]);
}
