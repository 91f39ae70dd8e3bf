import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import {
  cgroupBase,
  cgroupSupport,
  createCgroups,
  destroyCgroups,
  procsFiles,
  WORKSHOP_OOM_SCORE_ADJ,
  type CgroupPaths,
} from './cgroups.js';
import {
  entryOf,
  execInSandbox,
  killSandbox,
  prepareLayout,
  privilegedEnv,
  sandboxArgv,
  startSandbox,
  type ExecSpec,
  type SandboxHandle,
} from './launcher.js';
import { sandboxEnterPath } from './seccomp.js';

// The workshop's variables (its agent token, granted secrets) reach the sandbox in the
// environment of the privileged entry, never on a command line: every host user can read any
// process's /proc/PID/cmdline. After the privilege drop they become exactly the program's
// environment, whatever their values hold.
describe('environment handover to a sandbox', () => {
  const handle = { pid: 1, startTime: '0', uid: 600001, cgroups: null };
  const secret = 'atl_s3cr3t "$(id)" `uname` \\ \n; rm -rf / #';
  const spec: ExecSpec = {
    command: ['/usr/bin/env'],
    cwd: '/workspace',
    env: { PATH: '/usr/bin:/bin', ATELIER_TOKEN: secret, EMPTY: '', 'odd-name': 'visible' },
  };

  it('puts no value on the command line, and only prefixed names in the privileged environment', () => {
    const argv = sandboxArgv(handle, spec);
    assert.ok(!argv.some((a) => a.includes('s3cr3t') || a.includes('visible')), `a value is on the command line: ${JSON.stringify(argv)}`);
    const env = privilegedEnv(spec);
    assert.deepEqual(Object.keys(env).sort(), [
      'LANG',
      'PATH',
      '__ATELIER_ENV_ATELIER_TOKEN',
      '__ATELIER_ENV_EMPTY',
      '__ATELIER_ENV_PATH',
      '__ATELIER_ENV_odd-name',
    ]);
    assert.equal(env.__ATELIER_ENV_ATELIER_TOKEN, secret);
  });

  it("finds an entry's sandbox and label on its command line, this server's and an older one's", () => {
    const marked = sandboxArgv({ ...handle, pid: 4242 }, { ...spec, label: 'atelier-outlives-server' });
    assert.deepEqual(entryOf(marked), { target: 4242, label: 'atelier-outlives-server' });
    // The workshop's own command may name the label: it is not the entry's.
    const unmarked = sandboxArgv(
      { ...handle, pid: 4242 },
      { ...spec, command: ['sh', '-c', 'sleep 1', '--label', 'atelier-outlives-server'] },
    );
    assert.deepEqual(entryOf(unmarked), { target: 4242, label: undefined });
    // A server from before sandbox-enter: nsenter, the label as `$0` of its environment step.
    const legacy = ['/usr/bin/nsenter', '-t', '77', '-m', '--', '/run/seccomp-exec', '/usr/bin/setpriv', '--', '/bin/sh', '-c'];
    const applyEnv = 'n=$1; shift; unset PATH LANG; while …';
    assert.deepEqual(entryOf([...legacy, applyEnv, 'atelier-outlives-server', '0', 'sh', '-c', applyEnv, 'x']), {
      target: 77,
      label: 'atelier-outlives-server',
    });
    // Unmarked, its `$0` was `sh`.
    assert.deepEqual(entryOf([...legacy, applyEnv, 'sh', '0', 'true']), { target: 77, label: 'sh' });
    // A helper of the server (`nsenter -t PID -n …`): no environment step, no label.
    assert.deepEqual(entryOf(['/usr/bin/nsenter', '-t', '77', '-n', '--', 'python3']), { target: 77, label: undefined });
    assert.equal(entryOf(['/usr/bin/sleep', '--target', '5']), undefined);
    assert.equal(entryOf(['/x/sandbox-enter', '--target', 'abc']), undefined);
  });
});

// sandbox-enter's own refusals: what a wrong command line gets, before it does anything.
describe('sandbox-enter refuses a bad command line', () => {
  const enter = (args: string[]): { status: number | null; stderr: string } => {
    const r = spawnSync(sandboxEnterPath(), args, { env: {} });
    return { status: r.status, stderr: r.stderr.toString() };
  };
  const ok = ['--target', '2', '--uid', '65000', '--cwd', '/workspace'];

  it('says what is wrong and exits 125', () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /missing --target/],
      [['--target', '1', '--uid', '65000', '--cwd', '/', '--', 'true'], /--target takes the host pid .* 1$/m],
      [['--target', 'x', '--uid', '65000', '--cwd', '/', '--', 'true'], /--target takes/],
      [['--target', '2', '--uid', '0', '--cwd', '/', '--', 'true'], /--uid takes the workshop's host uid \(never 0\)/],
      [['--target', '2', '--cwd', '/', '--', 'true'], /give exactly one of --uid UID .* or --rootless/],
      [['--target', '2', '--uid', '65000', '--rootless', '--cwd', '/', '--', 'true'], /give exactly one of/],
      [['--target', '2', '--uid', '65000', '--', 'true'], /missing --cwd/],
      [['--target', '2', '--uid', '65000', '--cwd', 'workspace', '--', 'true'], /--cwd takes one absolute directory/],
      [[...ok, '--cgroup', 'relative/cgroup.procs', '--', 'true'], /--cgroup takes the absolute path/],
      [[...ok, '--oom-score-adj', '5000', '--', 'true'], /--oom-score-adj takes a number from -1000 to 1000/],
      [[...ok, '--frobnicate', 'x', '--', 'true'], /unknown option --frobnicate/],
      [[...ok, '--'], /missing the command after --/],
      [[...ok, '--target'], /missing the value of --target/],
    ];
    for (const [args, message] of cases) {
      const r = enter(args);
      assert.equal(r.status, 125, `${JSON.stringify(args)}: ${r.stderr}`);
      assert.match(r.stderr, message, JSON.stringify(args));
      assert.match(r.stderr, /^usage: sandbox-enter --target PID/m);
    }
  });

  it("never enters a process that shares this host's namespaces (a sandbox gone, its pid reused)", () => {
    const r = enter(['--target', String(process.pid), '--uid', '65000', '--cwd', '/', '--', 'true']);
    assert.equal(r.status, 125);
    assert.match(r.stderr, new RegExp(`process ${process.pid} is not a sandbox's: it shares this host's mount or PID namespace`));
  });

  it('stops when a cgroup cannot be joined (exit 111), before entering anything', () => {
    const r = enter([
      '--target',
      String(process.pid),
      '--uid',
      '65000',
      '--cgroup',
      '/nonexistent/cgroup.procs',
      '--cwd',
      '/',
      '--',
      'true',
    ]);
    assert.equal(r.status, 111);
    assert.match(r.stderr, /cannot join the workshop's cgroup \/nonexistent\/cgroup\.procs: no such file or directory/);
  });
});

// The entry into real sandboxes, as root (a host uid of the workshop's own, its cgroups where the
// host has them) and rootless (uid 0 of a user namespace).
for (const rootless of [false, true]) {
  describe(`entering a ${rootless ? 'rootless' : 'root'} sandbox`, () => {
    const uid = 64_998;
    let root: string;
    let handle: SandboxHandle;
    let cgroups: CgroupPaths | null = null;
    let base: CgroupPaths | undefined;
    const env = { PATH: '/usr/bin:/bin', LD_PRELOAD: '/nonexistent/preload.so', TOKEN: 'a "$(id)" b', 'odd-name': 'odd value' };
    const run = (
      command: string[],
      over: Partial<ExecSpec> = {},
    ): Promise<{ code: number | null; signal: string | null; out: string; err: string }> =>
      new Promise((resolve) => {
        const child = execInSandbox(handle, { command, cwd: '/workspace', env, ...over });
        const out: Buffer[] = [];
        const err: Buffer[] = [];
        child.stdout!.on('data', (d: Buffer) => out.push(d));
        child.stderr!.on('data', (d: Buffer) => err.push(d));
        child.stdin!.end();
        child.on('close', (code, signal) =>
          resolve({ code, signal, out: Buffer.concat(out).toString(), err: Buffer.concat(err).toString() }),
        );
      });

    before(async () => {
      root = mkdtempSync('/tmp/atelier-test-enter-');
      if (!rootless && cgroupSupport().ok) {
        base = cgroupBase(`test-enter-${process.pid}`);
        cgroups = createCgroups(base, 'ws', { cpus: 1, memoryBytes: 256 << 20, pids: 64 });
      }
      const spec = { root, hostname: 'enter-test', uid, rootless, cgroups };
      const layout = prepareLayout(spec);
      mkdirSync(layout.workspace, { mode: 0o755 });
      if (!rootless) chownSync(layout.workspace, uid, uid);
      handle = await startSandbox(spec);
    });
    after(async () => {
      if (handle) await killSandbox(handle);
      if (cgroups) await destroyCgroups(cgroups);
      for (const dir of Object.values(base ?? {})) rmdirSync(dir);
      rmSync(root, { recursive: true, force: true });
    });

    it('drops every privilege under the system-call filter', async () => {
      const r = await run([
        '/bin/sh',
        '-c',
        'id -u; id -G; grep -E "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):" /proc/self/status; cat /proc/self/oom_score_adj',
      ]);
      assert.equal(r.code, 0, r.err);
      const [id, groups, ...status] = r.out.trim().split('\n');
      assert.equal(id, rootless ? '0' : String(uid));
      assert.equal(groups, rootless ? '0' : String(uid));
      assert.deepEqual(status.slice(0, -1), [
        'CapInh:\t0000000000000000',
        'CapPrm:\t0000000000000000',
        'CapEff:\t0000000000000000',
        'CapBnd:\t0000000000000000',
        'CapAmb:\t0000000000000000',
        'NoNewPrivs:\t1',
        'Seccomp:\t2',
      ]);
      assert.equal(status.at(-1), String(WORKSHOP_OOM_SCORE_ADJ));
    });

    it("gives the program the workshop's environment, which no privileged step saw", async () => {
      const r = await run(['/usr/bin/env']);
      assert.equal(r.code, 0, r.err);
      assert.deepEqual(r.out.trim().split('\n').sort(), [
        'LD_PRELOAD=/nonexistent/preload.so',
        'PATH=/usr/bin:/bin',
        'PWD=/workspace',
        'TOKEN=a "$(id)" b',
        'odd-name=odd value',
      ]);
      // The dynamic loader complains of the missing LD_PRELOAD once: for env itself, the one
      // dynamically linked program that got the workshop's environment.
      assert.equal(r.err.match(/LD_PRELOAD cannot be preloaded/g)?.length, 1, r.err);
    });

    it('starts in the directory asked for, as the workshop; a bad one is exit 126', async () => {
      const tmp = await run(['/bin/sh', '-c', 'pwd; echo $PWD'], { cwd: '/tmp' });
      assert.equal(tmp.out, '/tmp\n/tmp\n');
      const missing = await run(['pwd'], { cwd: '/nonexistent' });
      assert.equal(missing.code, 126);
      assert.match(missing.err, /sandbox-enter: cd \/nonexistent: no such file or directory/);
    });

    it("passes the command's exit status and signal on, and says when it cannot run", async () => {
      assert.equal((await run(['sh', '-c', 'exit 7'])).code, 7);
      const killed = await run(['sh', '-c', 'kill -TERM $$']);
      assert.equal(killed.signal, 'SIGTERM');
      const missing = await run(['no-such-command']);
      assert.equal(missing.code, 127);
      assert.match(missing.err, /no-such-command: command not found/);
      const notExecutable = await run(['/etc/hostname']);
      assert.equal(notExecutable.code, 126);
      // Searched in the workshop's PATH, not the privileged one.
      const made = await run([
        'sh',
        '-c',
        'mkdir -p /tmp/bin && printf "#!/bin/sh\\necho found\\n" > /tmp/bin/only-here && chmod +x /tmp/bin/only-here',
      ]);
      assert.equal(made.code, 0, made.err);
      const found = await run(['only-here'], { env: { ...env, PATH: '/tmp/bin:/usr/bin:/bin' } });
      assert.equal(found.out, 'found\n', found.err);
      // A script without `#!` runs under /bin/sh, as a shell's exec ran it.
      const script = await run(['sh', '-c', 'printf "echo script \\$1\\n" > /tmp/s && chmod +x /tmp/s && exec /tmp/s one']);
      assert.equal(script.out, 'script one\n', script.err);
    });

    it('reaches the command with a signal to the process group; the cgroups count it', async () => {
      const child = execInSandbox(handle, { command: ['/bin/sh', '-c', 'echo ready; exec sleep 60'], cwd: '/workspace', env });
      child.stdin!.end();
      await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
      for (const file of cgroups ? procsFiles(cgroups) : [])
        assert.ok(readFileSync(file, 'utf8').split('\n').includes(String(child.pid)), `${child.pid} is not in ${file}`);
      const exited = new Promise<string | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
      process.kill(-child.pid!, 'SIGTERM');
      assert.equal(await exited, 'SIGTERM');
    });

    it('runs PTY-style entries the same way (the argv and environment a caller spawns itself)', async () => {
      const spec = { command: ['/bin/sh', '-c', 'echo "$TOKEN"'], cwd: '/workspace', env, label: 'atelier-outlives-server' };
      const argv = sandboxArgv(handle, spec);
      const r = await new Promise<string>((resolve) => {
        const child = spawn(argv[0]!, argv.slice(1), { env: privilegedEnv(spec), stdio: ['ignore', 'pipe', 'inherit'] });
        const out: Buffer[] = [];
        child.stdout.on('data', (d: Buffer) => out.push(d));
        child.on('close', () => resolve(Buffer.concat(out).toString()));
      });
      assert.equal(r, 'a "$(id)" b\n');
      assert.deepEqual(entryOf(argv), { target: handle.pid, label: 'atelier-outlives-server' });
    });

    // Last: it takes the sandbox's loader away.
    it('refuses a sandbox without the filter loader, whose own processes would run unfiltered', async () => {
      // What a sandbox started before the filter looked like.
      const umount = spawnSync('nsenter', ['-t', String(handle.pid), '-m', '-p', 'umount', '/run/seccomp-exec']);
      assert.equal(umount.status, 0, umount.stderr.toString());
      const r = await run(['true']);
      assert.equal(r.code, 125);
      assert.match(r.err, /this workshop's sandbox was started without the system-call filter .*recreate the workshop/);
    });
  });
}
