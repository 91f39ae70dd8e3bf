import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chownSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, TestServer, makeRepo } from './helpers/server.js';

// The system-call filter, tried from inside real workshops as the agent would (API exec), with a
// root server and a rootless one. The probe (helpers/syscall-probe.c) is compiled inside the
// workshop with its C compiler, and also run outside, without the filter, as an unprivileged user
// who is root of a user namespace of its own: there, each family's "witness" call gives another
// answer than EPERM, so a missing filter fails these tests.

const NOBODY = 65534;
const PROBE_SOURCE = readFileSync(join(REPO_ROOT, 'test', 'helpers', 'syscall-probe.c'), 'utf8');

/** Each refused family: its probes with the answer expected inside, and the probes whose unfiltered answer differs. */
const FAMILIES: { family: string; expect: Record<string, string>; witness: string[] }[] = [
  {
    family: 'new user and other namespaces (unshare, setns, clone with namespace flags)',
    expect: { unshare: 'EPERM', setns: 'EPERM', clone_newuser: 'EPERM', clone_newns: 'EPERM' },
    witness: ['unshare', 'setns', 'clone_newuser'],
  },
  { family: 'clone3 (ENOSYS, so that libc falls back to clone)', expect: { clone3: 'ENOSYS' }, witness: ['clone3'] },
  {
    family: 'mounts',
    expect: { mount: 'EPERM', umount2: 'EPERM', pivot_root: 'EPERM', chroot: 'EPERM', open_tree: 'EPERM', fsopen: 'EPERM' },
    witness: ['mount', 'umount2', 'chroot', 'open_tree'],
  },
  {
    family: 'kernel keyring',
    expect: { add_key: 'EPERM', keyctl: 'EPERM', request_key: 'EPERM' },
    witness: ['add_key', 'keyctl', 'request_key'],
  },
  { family: 'bpf', expect: { bpf: 'EPERM' }, witness: ['bpf'] },
  { family: 'perf events', expect: { perf_event_open: 'EPERM' }, witness: ['perf_event_open'] },
  { family: 'userfaultfd', expect: { userfaultfd: 'EPERM' }, witness: ['userfaultfd'] },
  { family: 'io_uring', expect: { io_uring_setup: 'EPERM' }, witness: ['io_uring_setup'] },
  { family: 'kexec', expect: { kexec_load: 'EPERM', kexec_file_load: 'EPERM' }, witness: ['kexec_load', 'kexec_file_load'] },
  {
    family: 'kernel modules',
    expect: { init_module: 'EPERM', finit_module: 'EPERM', delete_module: 'EPERM' },
    witness: ['init_module', 'finit_module', 'delete_module'],
  },
  {
    family: 'other processes (kcmp, pidfd_getfd, process_madvise)',
    expect: { kcmp: 'EPERM', pidfd_getfd: 'EPERM', process_madvise: 'EPERM' },
    witness: ['kcmp', 'pidfd_getfd', 'process_madvise'],
  },
  {
    family: 'host administration (swap, reboot, names, accounting, kernel log)',
    expect: { swapon: 'EPERM', reboot: 'EPERM', sethostname: 'EPERM', acct: 'EPERM', syslog: 'EPERM' },
    witness: ['reboot', 'sethostname'],
  },
  { family: 'clock', expect: { settimeofday: 'EPERM', clock_settime: 'EPERM' }, witness: ['clock_settime'] },
  {
    family: 'raw I/O and 16-bit segments',
    expect: { iopl: 'EPERM', ioperm: 'EPERM', modify_ldt: 'EPERM' },
    witness: ['iopl', 'ioperm', 'modify_ldt'],
  },
  { family: 'NUMA memory policy', expect: { mbind: 'EPERM', get_mempolicy: 'EPERM' }, witness: ['mbind', 'get_mempolicy'] },
  { family: 'file handles', expect: { open_by_handle_at: 'EPERM' }, witness: ['open_by_handle_at'] },
  {
    family: 'personality beyond Linux and the query',
    expect: { personality_norandom: 'EPERM', personality_query: 'ok' },
    witness: ['personality_norandom'],
  },
  {
    family: 'socket families AF_VSOCK and AF_ALG (others work)',
    expect: { socket_vsock: 'EPERM', socket_alg: 'EPERM', socket_inet: 'ok', socket_unix: 'ok' },
    witness: ['socket_vsock', 'socket_alg'],
  },
  { family: 'the i386 and x32 ABIs', expect: { i386_getpid: 'EPERM', x32_getpid: 'EPERM' }, witness: ['i386_getpid', 'x32_getpid'] },
  { family: 'system calls newer than the profile (ENOSYS)', expect: { fchmodat2: 'ENOSYS' }, witness: ['fchmodat2'] },
];

function parse(out: string): Record<string, string> {
  const r: Record<string, string> = {};
  for (const line of out.trim().split('\n')) {
    const [name, answer] = line.split(' ');
    if (name && answer) r[name] = answer;
  }
  return r;
}

/** The probe's answers outside any workshop and without the filter: root of a fresh user namespace, as `nobody`. */
let control: Record<string, string> = {};
let base = '';

before(() => {
  base = mkdtempSync('/tmp/atelier-seccomp-');
  execFileSync('chmod', ['755', base]);
  const probe = join(base, 'probe');
  execFileSync('cc', ['-O1', '-pthread', '-o', probe, '-x', 'c', '-'], { input: PROBE_SOURCE });
  const names = FAMILIES.flatMap((f) => Object.keys(f.expect));
  const r = spawnSync(
    'setpriv',
    [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', 'unshare', '-Urpu', '--fork', probe, ...names],
    {
      encoding: 'utf8',
      timeout: 30_000,
    },
  );
  assert.equal(r.status, 0, r.stderr);
  control = parse(r.stdout);
});
after(() => {
  if (base) rmSync(base, { recursive: true, force: true });
});

/** Starts a server as root, or as `nobody` (rootless), as test/rootless.test.ts does. */
async function startServer(rootless: boolean, dir: string): Promise<TestServer> {
  if (!rootless) return TestServer.start();
  mkdirSync(dir, { recursive: true });
  chownSync(dir, NOBODY, NOBODY);
  let bin = join(REPO_ROOT, 'bin', 'atelier');
  const readable = spawnSync('setpriv', [
    `--reuid=${NOBODY}`,
    `--regid=${NOBODY}`,
    '--clear-groups',
    'test',
    '-r',
    join(REPO_ROOT, 'package.json'),
  ]);
  if (readable.status !== 0) {
    const copy = join(dir, 'app');
    for (const part of ['bin', 'dist', 'node_modules', 'package.json'])
      cpSync(join(REPO_ROOT, part), join(copy, part), { recursive: true });
    execFileSync('chmod', ['-R', 'a+rX', copy]);
    bin = join(copy, 'bin', 'atelier');
  }
  const home = join(dir, 'home');
  mkdirSync(home);
  chownSync(home, NOBODY, NOBODY);
  const server = new TestServer(join(dir, 'data'));
  server.runAs = { uid: NOBODY, gid: NOBODY, home, bin };
  await server.boot();
  return server;
}

for (const mode of ['root', 'rootless'] as const) {
  describe(`system-call filter in a ${mode} server's workshops`, () => {
    let server: TestServer;
    let ws: { id: string };
    const sh = (script: string, timeoutSeconds = 120) => server.exec(ws.id, ['sh', '-c', script], { timeoutSeconds });

    before(async () => {
      server = await startServer(mode === 'rootless', join(base, mode));
      const repo = makeRepo({ 'probe.c': PROBE_SOURCE, 'README.md': '# seccomp\n' });
      if (mode === 'rootless') execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, repo]);
      ws = await server.createWorkshop({ repo });
      assert.equal((ws as { status?: string }).status, 'Running');
      // The workshop's own C compiler builds the probe, under the filter.
      const cc = await sh('cc -O1 -pthread -o /tmp/probe probe.c');
      assert.equal(cc.exitCode, 0, cc.stderr);
    });
    after(async () => {
      await server?.dispose();
    });

    it('says at start which filter it applied, and no longer that there is none', () => {
      assert.match(server.log, /system-call filter: atelier-default-v1 \(x86_64\), 362 rules \(288 allowed, 3 by argument, 71 refused/);
      assert.doesNotMatch(server.log, /no seccomp filter/);
    });

    for (const f of FAMILIES) {
      it(`refuses ${f.family}`, async () => {
        const r = await server.exec(ws.id, ['/tmp/probe', ...Object.keys(f.expect)]);
        assert.equal(r.exitCode, 0, r.stderr);
        assert.deepEqual(parse(r.stdout), f.expect);
        for (const w of f.witness) assert.notEqual(control[w], f.expect[w], `${w} gives ${control[w]} without the filter`);
      });
    }

    it('runs every process of the workshop under the filter, the exec itself and the idle one included', async () => {
      const self = await sh('grep -E "^(Seccomp|NoNewPrivs)" /proc/self/status');
      assert.match(self.stdout, /NoNewPrivs:\s+1\nSeccomp:\s+2\n/);
      await sh('sleep 300 >/dev/null 2>&1 &');
      // Every process of the workshop's uid (root-owned ones are bwrap's init and the server's
      // nsenter before its drop, which the workshop cannot touch).
      const all = await sh(
        'me=$(id -u); for s in /proc/[0-9]*/status; do u=$(awk "/^Uid:/{print \\$2}" $s 2>/dev/null); [ "$u" = "$me" ] || continue; echo "$(awk "/^Name:/{print \\$2}" $s) $(awk "/^Seccomp:/{print \\$2}" $s)"; done',
      );
      const lines = all.stdout.trim().split('\n');
      assert.ok(
        lines.some((l) => l.startsWith('sleep ')),
        all.stdout,
      );
      for (const l of lines) assert.match(l, / 2$/, `without the filter: ${l}`);
    });

    it('refuses `unshare -Ur` (no root in a new user namespace)', async () => {
      const r = await sh('unshare -Ur id -u 2>&1; echo "rc=$?"; unshare --user --map-current-user true 2>&1; echo "rc=$?"');
      assert.match(r.stdout, /Operation not permitted\nrc=1\n.*Operation not permitted\nrc=1\n$/);
    });

    it("lets a debugger trace the workshop's own processes, and nothing else", async () => {
      const r = await sh('strace -f -qq -e trace=execve -o /tmp/trace sh -c "true" && grep -c execve /tmp/trace; /tmp/probe ptrace_init');
      assert.match(r.stdout, /^[1-9]\d*\nptrace_init EPERM\n$/, r.stderr);
    });

    it('still runs ordinary developer work: git, a C compiler, node and its test runner, npm, pip, python', async () => {
      const script = String.raw`set -e
cd /tmp
# git
git init -q -b main repo && cd repo && git config user.email a@b.c && git config user.name a
echo one > f && git add f && git commit -qm one && git checkout -qb topic && echo two >> f && git commit -qam two
git checkout -q main && git merge -q topic && git clone -q . ../clone && git -C ../clone log --oneline | wc -l
cd /tmp
# C with threads
printf '#include <pthread.h>\n#include <stdio.h>\nstatic void *f(void *a){return a;}\nint main(void){pthread_t t;pthread_create(&t,0,f,0);pthread_join(t,0);puts("c ok");return 0;}\n' > t.c
cc -pthread -o t t.c && ./t
# node: an HTTP server and a client, a worker thread, a child process
node -e '
const http = require("http"); const { Worker } = require("worker_threads"); const { execFileSync } = require("child_process");
const s = http.createServer((q, r) => r.end("node ok")).listen(0, "127.0.0.1", async () => {
  const body = await (await fetch("http://127.0.0.1:" + s.address().port + "/")).text();
  const w = new Worker("require(\"worker_threads\").parentPort.postMessage(6*7)", { eval: true });
  w.on("message", (n) => { console.log(body, n, execFileSync("echo", ["child"]).toString().trim()); s.close(); w.terminate(); });
});'
# node's test runner
mkdir -p nt && printf 'const test = require("node:test"); const assert = require("node:assert");\ntest("adds", () => assert.equal(1 + 1, 2));\n' > nt/a.test.js
node --test nt/ > nt.out && grep -c "^# pass 1" nt.out
# npm: pack a package, install it from the tarball, no registry
mkdir -p lib && cd lib && printf '{"name":"lib","version":"1.0.0","main":"index.js"}' > package.json && echo 'module.exports = () => "npm ok"' > index.js
npm pack --silent >/dev/null && cd .. && mkdir -p app && cd app && printf '{"name":"app","version":"1.0.0"}' > package.json
npm install --offline --no-audit --no-fund --silent ../lib/lib-1.0.0.tgz && node -e 'console.log(require("lib")())' && cd ..
# pip: install a local package without an index
mkdir -p pp/hello && echo 'def hi(): return "pip ok"' > pp/hello/__init__.py
printf 'from setuptools import setup\nsetup(name="hello", version="1.0", packages=["hello"])\n' > pp/setup.py
python3 -m pip install -q --no-index --no-build-isolation --target /tmp/site ./pp 2>/dev/null
PYTHONPATH=/tmp/site python3 -c 'import hello; print(hello.hi())'
# python: threads, a subprocess, asyncio, sqlite
python3 -c '
import asyncio, sqlite3, subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
out = subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout.strip()
async def main(): await asyncio.sleep(0); return "async"
db = sqlite3.connect(":memory:"); db.execute("create table t(x)"); db.execute("insert into t values (1)")
print("python ok", out, asyncio.run(main()), db.execute("select count(*) from t").fetchone()[0])'
`;
      const r = await sh(script, 300);
      assert.equal(r.exitCode, 0, `${r.stdout}\n${r.stderr}`);
      assert.equal(r.stdout, '2\nc ok\nnode ok 42 child\n1\nnpm ok\npip ok\npython ok sub async 1\n', r.stderr);
    });
  });
}
