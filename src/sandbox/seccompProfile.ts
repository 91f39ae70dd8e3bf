/**
 * The system-call filter every workshop process runs under: the reviewed profile, as a table.
 *
 * Built from Docker/Podman's default profile (moby `profiles/seccomp/default.json`, the set a
 * container WITHOUT added capabilities gets) and stricter in three places: io_uring and
 * modify_ldt are refused, and so is AF_ALG. Every x86_64 system call is named exactly once
 * below (allowed, allowed by argument, or refused with its family's reason): a unit test checks
 * it, and another that nothing allowed here is refused by Docker's profile. A call is refused
 * with EPERM (never killed), clone3 with ENOSYS so that libc falls back to clone, whose flags the
 * filter can read. A call newer than the table (seccompSyscalls.ts) gets ENOSYS, which is what
 * libc expects of a kernel that lacks it. The i386 and x32 ABIs are refused whole: a 64-bit
 * process could use them to reach calls by other numbers.
 */

/** Linux's errno values the filter returns. */
export const ERRNO = { EPERM: 1, ENOSYS: 38 } as const;

/** A family of refused system calls, and why it is refused. */
export interface RefusedFamily {
  family: string;
  why: string;
  names: string[];
  /** EPERM unless said. */
  errno?: keyof typeof ERRNO;
}

/** A call allowed only for some values of one argument (its lower 32 bits: every one here is an int or a flag word). */
export type ArgRule =
  | { name: string; why: string; arg: number; allowIf: 'noBitsOf'; mask: number }
  | { name: string; why: string; arg: number; allowIf: 'notIn'; values: number[] }
  | { name: string; why: string; arg: number; allowIf: 'in'; values: number[] };

export interface SeccompProfile {
  name: string;
  arch: 'x86_64';
  allowed: string[];
  byArgument: ArgRule[];
  refused: RefusedFamily[];
}

// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET.
const CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000;

export const PROFILE: SeccompProfile = {
  name: 'atelier-default-v1',
  arch: 'x86_64',
  // What ordinary programs use: files, memory, processes and threads, signals, timers, sockets,
  // System V and POSIX IPC (the IPC namespace is the workshop's own), scheduling of its own
  // threads, Landlock and seccomp (a program may only restrict itself further).
  // ptrace and process_vm_readv/writev stay allowed (debuggers, strace): the workshop's PID
  // namespace shows only its own processes, and the few root-owned ones it can see (bwrap's init,
  // the server's nsenter before it drops to the workshop's uid, already under this filter)
  // refuse a tracer without capabilities. Since Linux 4.8 a tracer cannot step around the filter.
  allowed: `accept accept4 access adjtimex alarm arch_prctl bind brk capget capset chdir chmod chown clock_adjtime
    clock_getres clock_gettime clock_nanosleep close close_range connect copy_file_range creat dup dup2 dup3
    epoll_create epoll_create1 epoll_ctl epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 execve execveat
    exit exit_group faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchownat
    fcntl fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex
    futex_waitv futimesat get_robust_list get_thread_area getcpu getcwd getdents getdents64 getegid geteuid
    getgid getgroups getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid
    getresuid getrlimit getrusage getsid getsockname getsockopt gettid gettimeofday getuid getxattr
    inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents
    io_setup io_submit ioctl ioprio_get ioprio_set kill landlock_add_rule landlock_create_ruleset
    landlock_restrict_self lchown lgetxattr link linkat listen listxattr llistxattr lremovexattr lseek lsetxattr
    lstat madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall
    mmap mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink mremap msgctl msgget
    msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat open openat openat2
    pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64
    preadv preadv2 prlimit64 process_mrelease process_vm_readv process_vm_writev pselect6 ptrace pwrite64 pwritev
    pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg remap_file_pages removexattr
    rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask
    rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_tgsigqueueinfo sched_get_priority_max
    sched_get_priority_min sched_getaffinity sched_getattr sched_getparam sched_getscheduler
    sched_rr_get_interval sched_setaffinity sched_setattr sched_setparam sched_setscheduler sched_yield seccomp
    select semctl semget semop semtimedop sendfile sendmmsg sendmsg sendto set_robust_list set_thread_area
    set_tid_address setfsgid setfsuid setgid setgroups setitimer setpgid setpriority setregid setresgid setresuid
    setreuid setrlimit setsid setsockopt setuid setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd
    signalfd4 socketpair splice stat statfs statx symlink symlinkat sync sync_file_range syncfs sysinfo tee
    tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_settime timerfd_create
    timerfd_gettime timerfd_settime times tkill truncate umask uname unlink unlinkat utime utimensat utimes vfork
    vmsplice wait4 waitid write writev`
    .split(/\s+/)
    .filter(Boolean),
  byArgument: [
    {
      name: 'clone',
      why: 'threads and processes, but no new namespace: a user namespace would give root inside it and a large kernel surface',
      arg: 0,
      allowIf: 'noBitsOf',
      mask: CLONE_NAMESPACES,
    },
    {
      name: 'socket',
      why: 'every family but AF_VSOCK (a way to the host of a virtual machine) and AF_ALG (the kernel crypto API, a frequent source of kernel bugs)',
      arg: 0,
      allowIf: 'notIn',
      values: [40, 38],
    },
    {
      name: 'personality',
      why: "only Linux's own personalities and the query (as Docker): others disable address-space randomisation or emulate other systems",
      arg: 0,
      // PER_LINUX, PER_LINUX32, UNAME26, PER_LINUX32|UNAME26, query.
      allowIf: 'in',
      values: [0x0, 0x8, 0x20000, 0x20008, 0xffffffff],
    },
  ],
  refused: [
    {
      family: 'namespaces',
      why: 'no new user (or other) namespace and no entering one: `unshare -Ur` would give root inside a new user namespace',
      names: ['unshare', 'setns'],
    },
    {
      family: 'clone3',
      why: 'its flags sit in memory the filter cannot read: ENOSYS makes libc fall back to clone, whose flags it checks',
      names: ['clone3'],
      errno: 'ENOSYS',
    },
    {
      family: 'mounts',
      why: 'the root is built by the server; nothing inside mounts, unmounts or changes root',
      names: [
        'mount',
        'umount2',
        'pivot_root',
        'chroot',
        'open_tree',
        'move_mount',
        'fsopen',
        'fsconfig',
        'fsmount',
        'fspick',
        'mount_setattr',
      ],
    },
    {
      family: 'kernel keyring',
      why: 'keys are not namespaced: one keyring per uid across the host',
      names: ['add_key', 'keyctl', 'request_key'],
    },
    { family: 'bpf', why: 'BPF programs run in the kernel', names: ['bpf'] },
    { family: 'perf events', why: 'a large kernel surface and a view of other processes', names: ['perf_event_open'] },
    { family: 'userfaultfd', why: 'used to widen race windows in kernel exploits', names: ['userfaultfd'] },
    {
      family: 'io_uring',
      why: 'a second system-call interface that this filter cannot see into (stricter than Docker; libuv and others fall back)',
      names: ['io_uring_setup', 'io_uring_enter', 'io_uring_register'],
    },
    { family: 'kexec', why: 'loads a new kernel', names: ['kexec_load', 'kexec_file_load'] },
    {
      family: 'kernel modules',
      why: 'loads code into the kernel',
      names: ['init_module', 'finit_module', 'delete_module', 'create_module', 'query_module', 'get_kernel_syms'],
    },
    {
      family: 'other processes',
      why: 'compares, takes file descriptors of or advises on the memory of processes (Docker: CAP_SYS_PTRACE only)',
      names: ['kcmp', 'pidfd_getfd', 'process_madvise'],
    },
    {
      family: 'host administration',
      why: "the host's swap, power, names, accounting, quotas, kernel log and terminals are not a workshop's",
      names: [
        'swapon',
        'swapoff',
        'reboot',
        'sethostname',
        'setdomainname',
        'acct',
        'quotactl',
        'quotactl_fd',
        'syslog',
        'vhangup',
        'lookup_dcookie',
        'fanotify_init',
      ],
    },
    { family: 'clock', why: "the clock is the host's", names: ['settimeofday', 'clock_settime'] },
    {
      family: 'raw I/O and old ABIs',
      why: 'port I/O, 16-bit segments (stricter than Docker), and calls Linux no longer implements',
      names: [
        'iopl',
        'ioperm',
        'modify_ldt',
        'uselib',
        'ustat',
        'sysfs',
        '_sysctl',
        'nfsservctl',
        'vserver',
        'tuxcall',
        'security',
        'afs_syscall',
        'getpmsg',
        'putpmsg',
        'epoll_ctl_old',
        'epoll_wait_old',
      ],
    },
    {
      family: 'NUMA memory policy',
      why: "moves memory between the host's nodes (Docker: CAP_SYS_NICE only)",
      names: ['mbind', 'set_mempolicy', 'get_mempolicy', 'migrate_pages', 'move_pages', 'set_mempolicy_home_node'],
    },
    {
      family: 'file handles',
      why: 'open_by_handle_at opens any file of a mounted filesystem by its handle, around the root of the sandbox (the "shocker" escape)',
      names: ['open_by_handle_at'],
    },
  ],
};
