import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { classify, compileFilter, seccompSummary, seccompWrap, SECCOMP_EXEC, type BpfInstruction } from './seccomp.js';
import { PROFILE } from './seccompProfile.js';
import { X86_64_SYSCALLS } from './seccompSyscalls.js';

// The compiled program, run here by a small classic-BPF interpreter over every x86_64 system call
// (the kernel's own answers, from inside real workshops, are in test/seccomp.test.ts).

const AUDIT_ARCH_X86_64 = 0xc000003e;
const AUDIT_ARCH_I386 = 0x40000003;
const ALLOW = 0x7fff0000;
const EPERM = 0x00050001;
const ENOSYS = 0x00050026;

let lastSteps = 0;
function stepsFor(prog: BpfInstruction[], nr: number): number {
  run(prog, nr);
  return lastSteps;
}

function run(prog: BpfInstruction[], nr: number, args: number[] = [], arch = AUDIT_ARCH_X86_64): number {
  const data = Buffer.alloc(64);
  data.writeInt32LE(nr, 0);
  data.writeUInt32LE(arch, 4);
  args.forEach((a, i) => data.writeBigUInt64LE(BigInt(a), 16 + 8 * i));
  let acc = 0;
  lastSteps = 0;
  for (let pc = 0; pc < prog.length; pc++) {
    lastSteps++;
    const x = prog[pc]!;
    const jump = (cond: boolean): void => void (pc += cond ? x.jt : x.jf);
    switch (x.code) {
      case 0x20:
        acc = data.readUInt32LE(x.k);
        break;
      case 0x15:
        jump(acc === x.k);
        break;
      case 0x35:
        jump(acc >= x.k);
        break;
      case 0x25:
        jump(acc > x.k);
        break;
      case 0x45:
        jump((acc & x.k) !== 0);
        break;
      case 0x05:
        pc += x.k;
        break;
      case 0x06:
        return x.k;
      default:
        throw new Error(`opcode 0x${x.code.toString(16)} at ${pc}`);
    }
  }
  throw new Error('fell off the end of the program');
}

// moby/moby profiles/seccomp/default.json (commit 00f3d189e4): what a container WITHOUT added
// capabilities may call on x86_64, unconditionally. Our allowed list must stay inside it.
const DOCKER_ALLOWED = new Set(
  `accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown clock_adjtime clock_getres
  clock_gettime clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3 epoll_create
  epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve
  execveat exit exit_group faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod fchmodat fchown
  fchownat fcntl fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate
  futex futex_waitv futimesat getcpu getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer
  getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid getresuid getrlimit get_robust_list
  getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getxattr inotify_add_watch
  inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents io_pgetevents ioprio_get
  ioprio_set io_setup io_submit io_uring_enter io_uring_register io_uring_setup kill landlock_add_rule
  landlock_create_ruleset landlock_restrict_self lchown lgetxattr link linkat listen listxattr llistxattr
  lremovexattr lseek lsetxattr lstat madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod
  mknodat mlock mlock2 mlockall mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend
  mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep
  newfstatat open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect
  poll ppoll prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 pwrite64 pwritev pwritev2 read
  readahead readlink readlinkat readv recvfrom recvmmsg recvmsg remap_file_pages removexattr rename renameat
  renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn
  rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam
  sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval sched_setaffinity
  sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop
  sendfile sendmmsg sendmsg sendto setfsgid setfsuid setgid setgroups setitimer setpgid setpriority setregid
  setresgid setresuid setreuid setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
  setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 socketpair splice stat statfs statx
  symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun
  timer_gettime timer_settime timerfd_create timerfd_gettime timerfd_settime times tkill truncate umask uname
  unlink unlinkat utime utimensat utimes vfork vmsplice wait4 waitid write writev process_vm_readv
  process_vm_writev ptrace arch_prctl modify_ldt`
    .split(/\s+/)
    .filter(Boolean),
);

describe('system-call filter profile and its BPF program', () => {
  const prog = compileFilter();

  it('names every x86_64 system call exactly once', () => {
    const classes = classify();
    assert.equal(classes.size, Object.keys(X86_64_SYSCALLS).length);
    const s = seccompSummary();
    assert.deepEqual(
      { rules: s.rules, allowed: s.allowed, byArgument: s.byArgument, refused: s.refused },
      { rules: 362, allowed: 288, byArgument: 3, refused: 71 },
    );
    assert.throws(() => classify({ ...PROFILE, allowed: [...PROFILE.allowed, 'mount'] }), /mount is both allowed and refused/);
    assert.throws(() => classify({ ...PROFILE, allowed: PROFILE.allowed.filter((n) => n !== 'read') }), /not classified: read/);
    assert.throws(() => classify({ ...PROFILE, allowed: [...PROFILE.allowed, 'no_such_call'] }), /not an x86_64 system call/);
  });

  it('is at least as strict as Docker’s default profile', () => {
    const wider = PROFILE.allowed.filter((n) => !DOCKER_ALLOWED.has(n));
    assert.deepEqual(wider, []);
    // Docker allows clone without namespace flags (mask 0x7E020000), socket but AF_VSOCK, and these personalities.
    const clone = PROFILE.byArgument.find((r) => r.name === 'clone');
    assert.ok(clone?.allowIf === 'noBitsOf' && (clone.mask & 0x7e020000) === 0x7e020000);
    const socket = PROFILE.byArgument.find((r) => r.name === 'socket');
    assert.ok(socket?.allowIf === 'notIn' && socket.values.includes(40));
    const persona = PROFILE.byArgument.find((r) => r.name === 'personality');
    assert.ok(persona?.allowIf === 'in' && persona.values.every((v) => [0, 8, 0x20000, 0x20008, 0xffffffff].includes(v)));
  });

  it('answers each system call as the profile says', () => {
    for (const [name, nr] of Object.entries(X86_64_SYSCALLS)) {
      const family = PROFILE.refused.find((f) => f.names.includes(name));
      const want = family ? (family.errno === 'ENOSYS' ? ENOSYS : EPERM) : ALLOW;
      if (PROFILE.byArgument.some((r) => r.name === name)) continue;
      assert.equal(run(prog, nr), want, name);
    }
    assert.equal(run(prog, X86_64_SYSCALLS.clone3!), ENOSYS);
    assert.equal(run(prog, X86_64_SYSCALLS.unshare!, [0x10000000]), EPERM);
  });

  it('reads the arguments of clone, socket and personality', () => {
    const nr = X86_64_SYSCALLS;
    // glibc's pthread_create and fork flags; then each namespace flag alone.
    assert.equal(run(prog, nr.clone!, [0x003d0f00]), ALLOW);
    assert.equal(run(prog, nr.clone!, [0x01200011]), ALLOW);
    for (const flag of [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000])
      assert.equal(run(prog, nr.clone!, [flag | 0x11]), EPERM, flag.toString(16));
    assert.equal(run(prog, nr.socket!, [2]), ALLOW);
    assert.equal(run(prog, nr.socket!, [1]), ALLOW);
    assert.equal(run(prog, nr.socket!, [16]), ALLOW);
    assert.equal(run(prog, nr.socket!, [40]), EPERM);
    assert.equal(run(prog, nr.socket!, [38]), EPERM);
    for (const p of [0, 8, 0x20000, 0x20008, 0xffffffff]) assert.equal(run(prog, nr.personality!, [p]), ALLOW, p.toString(16));
    assert.equal(run(prog, nr.personality!, [0x0040000]), EPERM);
  });

  it('refuses the i386 and x32 ABIs and answers ENOSYS to calls newer than its table', () => {
    assert.equal(run(prog, 20, [], AUDIT_ARCH_I386), EPERM);
    assert.equal(run(prog, 39 | 0x40000000), EPERM);
    assert.equal(run(prog, 451), ENOSYS);
    assert.equal(run(prog, 0x3fffffff), ENOSYS);
    assert.equal(run(prog, 400), EPERM); // a gap in the table, below its last call
  });

  it('is a program the kernel takes: jumps in bounds, a search rather than a list', () => {
    assert.ok(prog.length < 4096);
    // Every number is decided in a few steps (the kernel runs the program for each one when it installs it).
    let longest = 0;
    for (let nr = 0; nr < 500; nr++) {
      longest = Math.max(longest, stepsFor(prog, nr));
    }
    assert.ok(longest < 40, `${longest} steps for one call`);
    prog.forEach((x, pc) => {
      assert.ok(x.jt <= 255 && x.jf <= 255);
      const reach = x.code === 0x05 ? x.k : Math.max(x.jt, x.jf);
      if ((x.code & 0x07) === 0x05) assert.ok(pc + 1 + reach < prog.length, `jump out of the program at ${pc}`);
    });
    assert.equal(prog.at(-1)?.code, 0x06);
  });

  it('puts the loader first in a wrapped command line', () => {
    assert.deepEqual(seccompWrap(['/usr/bin/setpriv', '--', 'sleep']), [SECCOMP_EXEC, '/usr/bin/setpriv', '--', 'sleep']);
  });
});
