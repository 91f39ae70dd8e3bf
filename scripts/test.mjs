// Runs the whole suite: unit tests beside the sources, then integration tests in test/.
// Node 20 does not expand globs given to --test, so the file list is built here.
//
// Then it checks that the tests left nothing running. As root, the run is held in a pids cgroup
// of its own (every process the tests start, servers, their PostgreSQL, sandboxes and simulators
// included, is counted there, wherever it was re-parented): whatever is still in it once the
// runner is done, after a grace period, is named, killed, and fails the run. A test file cancelled
// by its timeout is caught too. (Mounts are not checked: another run's may be live at the time.)
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

function find(dir, out = []) {
  for (const entry of readdirSync(dir)) {
    const full = join(dir, entry);
    if (statSync(full).isDirectory()) find(full, out);
    else if (entry.endsWith('.test.ts')) out.push(full);
  }
  return out;
}

const PIDS = '/sys/fs/cgroup/pids';

/** Moves this process (so everything it starts) into a pids cgroup of its own; undefined when it cannot. */
function enterCgroup() {
  if (process.getuid?.() !== 0 || !existsSync(join(PIDS, 'cgroup.procs'))) return undefined;
  const own = readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .map((l) => l.split(':'))
    .find((f) => f[1]?.split(',').includes('pids'))?.[2];
  if (own === undefined) return undefined;
  const dir = join(PIDS, own, `atelier-tests-${process.pid}`);
  try {
    mkdirSync(dir);
  } catch {
    return undefined;
  }
  try {
    writeFileSync(join(dir, 'cgroup.procs'), String(process.pid));
  } catch {
    rmdirSync(dir);
    return undefined;
  }
  return { dir, parent: join(PIDS, own) };
}

/** Every pid in the cgroup `dir` and below, and the directories, deepest first. */
function walk(dir, pids = [], dirs = []) {
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(join(dir, e.name), pids, dirs);
  for (const p of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n')) if (p.trim()) pids.push(Number(p));
  dirs.push(dir);
  return { pids, dirs };
}

function cmdline(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim().slice(0, 300);
  } catch {
    return '(gone)';
  }
}

/** The processes the tests left (by cgroup): kills them; returns a description of each. */
async function leftovers(cg) {
  const found = [];
  if (cg) {
    const others = () => walk(cg.dir).pids.filter((p) => p !== process.pid);
    // A server told to stop may take a few seconds to stop its PostgreSQL.
    for (let i = 0; i < 150 && others().length > 0; i++) await sleep(100);
    for (const pid of others()) {
      found.push(`process ${pid}: ${cmdline(pid)}`);
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  }
  if (cg) {
    writeFileSync(join(cg.parent, 'cgroup.procs'), String(process.pid));
    for (let i = 0; i < 50; i++) {
      const { pids, dirs } = walk(cg.dir);
      if (pids.length === 0) {
        for (const d of dirs) {
          try {
            rmdirSync(d);
          } catch {
            // a frozen or busy child: left for the host to clean
          }
        }
        break;
      }
      await sleep(100);
    }
  }
  return found;
}

const filter = process.argv.slice(2);
let files = [...find('src'), ...find('test')].sort();
if (filter.length > 0) files = files.filter((f) => filter.some((x) => f.includes(x)));
const build = spawnSync('npm', ['run', '-s', 'build'], { stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);
const cg = enterCgroup();
// Stress tests (test/stress.*: a fork bomb and CPU and memory hogs in a workshop, then a server
// restart) run after the others, on their own: their load is what they test, and it would only
// slow the file that happened to run beside them.
const alone = files.filter((f) => /(^|\/)stress\.[^/]*$/.test(f));
const together = files.filter((f) => !alone.includes(f));
let status = 0;
// Each file's hang guard: 5 minutes, and 10 for the stress files, whose server restart under a
// fork bomb alone took 154–224 s here (load average ~250 on 2 cores).
for (const [batch, concurrency, timeoutMs] of [
  [together, 2, 300_000],
  [alone, 1, 600_000],
]) {
  if (batch.length === 0) continue;
  const run = spawnSync(
    process.execPath,
    ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, `--test-timeout=${timeoutMs}`, ...batch],
    {
      stdio: 'inherit',
    },
  );
  if (run.status !== 0) status = run.status ?? 1;
}
const left = await leftovers(cg);
if (!cg) process.stderr.write('test: not root (or no pids cgroup): processes the tests left behind are not checked\n');
if (left.length > 0) {
  process.stderr.write(`test: the tests left ${left.length} thing(s) behind (now removed):\n${left.map((l) => `  ${l}`).join('\n')}\n`);
  process.exit(status === 0 ? 1 : status);
}
process.exit(status);
