/*
 * sandbox-enter: runs a command inside a running workshop sandbox, as the workshop, in one
 * program (every exec, PTY, SSH channel and agent session enters this way; launcher.ts builds the
 * command line):
 *
 *   sandbox-enter --target PID [--label NAME] (--uid UID | --rootless) [--oom-score-adj N]
 *                 [--cgroup FILE]... --cwd DIR -- PROGRAM [ARG...]
 *
 * It replaces a chain of five execs (a shell joining the cgroups, nsenter, seccomp-exec, setpriv,
 * a shell applying the environment), 4.2 ms of CPU per entry of /bin/true against 0.9 ms now
 * (perf stat), with one static program of no C library (nolibc.h), so that `atelier exec` costs
 * little more than the command. Each step does what its predecessor in the chain did, in the same
 * order (the working directory excepted, see 6), for the same reasons:
 *
 *  1. The OOM score (--oom-score-adj), then the cgroups (--cgroup, each a cgroup.procs file that
 *     gets our pid), on the host, before anything else: every later step, and the command, is
 *     counted and limited as the workshop (memory, pids, freezer) and is the OOM killer's first
 *     choice. The paths are the host's: only here, before the mount namespace changes, do they
 *     resolve. A cgroup that cannot be joined stops the entry (exit 111): never a command
 *     outside its limits.
 *  2. The namespaces of the sandbox's PID 1 (--target): all of /proc/PID/ns/ are opened before
 *     the first setns (after the mount namespace, /proc is the sandbox's), then entered as nsenter
 *     does: rootless, the user namespace first (the others belong to it: only its capabilities
 *     let us enter them), keeping our credentials (uid 0 inside, as nsenter
 *     --preserve-credentials); then cgroup (root only: a rootless sandbox has none), IPC, UTS,
 *     network, PID, and the mount namespace last, which also moves our root and working
 *     directory to the sandbox's root. A target that shares our own mount or PID namespace (a
 *     sandbox gone and its pid reused by a host process) is refused: never a command on the host.
 *     The descriptors are opened close-on-exec and closed once used: nothing of the host reaches the
 *     command. A sandbox without the filter's loader (one started before the filter, whose own
 *     processes run unfiltered) is refused too, once its mount namespace shows it.
 *  3. A fork: setns(CLONE_NEWPID) places only our children in the sandbox's PID namespace. The
 *     parent stays outside, waits, and ends as the child did (its exit code, or the same signal
 *     raised on itself; a stopped child stops it too, as nsenter does), so the caller sees the
 *     command's own status. Both share the process group the server made (it spawns detached): a
 *     signal to the group reaches the command and this parent alike. The host-side arguments
 *     (the cgroup paths) are wiped from memory before the fork and the target's host pid right
 *     after it, so that the sandbox, which can read the child's /proc/PID/cmdline until the final
 *     exec, never sees a host path.
 *  4. The system-call filter (no_new_privs, then seccomp), in the child, while still privileged:
 *     no process of the workshop's uid ever runs without it, so none can be traced or have its
 *     memory written before it is in place (seccomp-exec.c, seccomp.ts).
 *  5. The privilege drop, as `setpriv --reuid=U --regid=U --clear-groups --inh-caps=-all
 *     --bounding-set=-all --no-new-privs` did: the bounding set first (dropping it needs
 *     CAP_SETPCAP, which the uid change takes away), then the groups (setgroups to none), the
 *     gid and the uid (real, effective and saved; the uid last, since changing the gid needs
 *     privilege), then capset to zero (inheritable, permitted, effective; and the ambient set,
 *     cleared). Rootless, the uid stays (0 of the user namespace, already the server's own uid
 *     on the host) and only the capabilities go. The filter allows these calls.
 *  6. The working directory (--cwd), as the workshop's uid: the same permission checks as the
 *     shell's `cd` had, and no privileged step ever resolves a path the workshop controls (nsenter
 *     -w entered /workspace as root, the PID 1's own directory: the workshop's uid owns it, so it
 *     makes no difference there). Failure is exit 126, as before.
 *  7. The environment: the workshop's variables arrive as `__ATELIER_ENV_<name>=value` in ours
 *     (never on a command line: any host user reads /proc/PID/cmdline), and become the
 *     command's whole environment only now, after the drop; the rest of ours (the privileged
 *     PATH and LANG) is dropped. Nothing before this point reads a variable (this program reads
 *     none, and runs no other), so a workshop's PATH or LD_PRELOAD never reached a privileged
 *     step. Any name a process may carry passes, the odd ones (`odd-name`) included. PWD is the
 *     working directory unless the workshop sets it, as the shell that applied them exported it.
 *  8. The command, searched in the workshop's PATH (as the shell did: the default one without
 *     it), a script without `#!` run by /bin/sh; not found is exit 127, not runnable 126.
 *
 * This program's own failures (bad arguments, a namespace it cannot enter) are exit 125 with a
 * message naming what to fix.
 */
#include <linux/capability.h>
#include <linux/fcntl.h>
#include <linux/filter.h>
#include <linux/prctl.h>
#include <linux/resource.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/signal.h>
#include <linux/wait.h>

#define PROGRAM_NAME "sandbox-enter"
#include "nolibc.h"
#include "seccomp-filter.h"

#define USAGE                                                                                       \
  "usage: sandbox-enter --target PID [--label NAME] (--uid UID | --rootless) [--oom-score-adj N] " \
  "[--cgroup FILE]... --cwd DIR -- PROGRAM [ARG...]"
#define FAILED 125
#define X_OK 1 /* access(2): may be executed */
#define MAX_CGROUPS 16
#define ENV_PREFIX "__ATELIER_ENV_"
/* As dash, when the workshop gives no PATH. */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static __attribute__((noreturn)) void usage(const char *what, const char *arg) {
  die(FAILED, what, arg, "\n", USAGE);
}

/* Whether `s` is a decimal number within [min, max] (then in *out). */
static int number(const char *s, long min, long max, long *out) {
  long v = 0;
  int neg = *s == '-';
  if (neg) s++;
  if (!*s) return 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > 100000000000L) return 0;
    v = v * 10 + (*s - '0');
  }
  if (neg) v = -v;
  if (v < min || v > max) return 0;
  *out = v;
  return 1;
}

static char *decimal(long v, char *end) {
  *--end = 0;
  do *--end = (char)('0' + v % 10);
  while ((v /= 10) > 0);
  return end;
}

static void wipe(char *s) {
  while (*s) *s++ = 0;
}

/* Writes `text` to the file at `path`; 0 or the error. */
static long put(const char *path, const char *text) {
  long fd = sys(__NR_open, (long)path, O_WRONLY | O_CLOEXEC, 0);
  if (fd < 0) return fd;
  long r = sys(__NR_write, fd, (long)text, (long)len(text));
  sys(__NR_close, fd, 0, 0);
  return r < 0 ? r : 0;
}

/* The namespaces entered, in nsenter's order; the user namespace (rootless) goes first, mnt last. */
enum { ROOT_ONLY, ROOTLESS_ONLY, ALWAYS };
static const struct {
  const char *name;
  int type;
  int when;
} NAMESPACES[] = {
    {"user", CLONE_NEWUSER, ROOTLESS_ONLY}, {"cgroup", CLONE_NEWCGROUP, ROOT_ONLY}, {"ipc", CLONE_NEWIPC, ALWAYS},
    {"uts", CLONE_NEWUTS, ALWAYS},          {"net", CLONE_NEWNET, ALWAYS},           {"pid", CLONE_NEWPID, ALWAYS},
    {"mnt", CLONE_NEWNS, ALWAYS},
};
#define NS_COUNT (sizeof(NAMESPACES) / sizeof(NAMESPACES[0]))

/* /proc/PID/ns/NAME into buf. */
static char *ns_path(char *buf, const char *pid, const char *name) {
  char *p = buf;
  for (const char *s = "/proc/"; *s;) *p++ = *s++;
  for (const char *s = pid; *s;) *p++ = *s++;
  for (const char *s = "/ns/"; *s;) *p++ = *s++;
  for (const char *s = name; *s;) *p++ = *s++;
  *p = 0;
  return buf;
}

/* Whether the target's namespace `name` is our own (its link reads the same: `mnt:[4026531841]`). */
static int shared_ns(const char *pid, const char *name) {
  char path[64], ours[64], theirs[64];
  long a = sys(__NR_readlink, (long)ns_path(path, "self", name), (long)ours, sizeof(ours) - 1);
  long b = sys(__NR_readlink, (long)ns_path(path, pid, name), (long)theirs, sizeof(theirs) - 1);
  if (a < 0 || b < 0) return 0; /* the open below says why */
  if (a != b) return 0;
  for (long i = 0; i < a; i++)
    if (ours[i] != theirs[i]) return 0;
  return 1;
}

/* Ends as the child ended: the parent's side of step 3. */
static __attribute__((noreturn)) void wait_for(long child) {
  int status = 0;
  for (;;) {
    long r = sys6(__NR_wait4, child, (long)&status, WUNTRACED, 0, 0, 0);
    if (r == -EINTR) continue;
    if (r < 0) die(FAILED, "waiting for the command: ", why(r), "", "");
    if ((status & 0xff) == 0x7f) {
      /* Stopped (a terminal's Ctrl-Z): stop too, so that whoever waits for us sees it; then go on. */
      sys(__NR_kill, sys(__NR_getpid, 0, 0, 0), SIGSTOP, 0);
      sys(__NR_kill, child, SIGCONT, 0);
      continue;
    }
    break;
  }
  int sig = status & 0x7f;
  if (sig == 0) for (;;) sys(__NR_exit_group, (status >> 8) & 0xff, 0, 0);
  /* Killed by a signal: the same signal, without a core of this privileged process. */
  struct rlimit none = {0, 0};
  sys6(__NR_prlimit64, 0, RLIMIT_CORE, (long)&none, 0, 0, 0);
  sys(__NR_kill, sys(__NR_getpid, 0, 0, 0), sig, 0);
  for (;;) sys(__NR_exit_group, 128 + sig, 0, 0);
}

__attribute__((used)) static void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  char **envp = argv + argc + 1;

  /* The arguments, all checked before anything is done. */
  char *target = 0, *label = 0, *oom = 0, *cwd = 0;
  char *cgroups[MAX_CGROUPS];
  int ncgroups = 0, rootless = 0;
  long uid = -1, value;
  long i = 1;
  for (; i < argc; i++) {
    char *opt = argv[i];
    if (same(opt, "--")) break;
    if (same(opt, "--rootless")) {
      rootless = 1;
      continue;
    }
    if (i + 1 >= argc) usage("missing the value of ", opt);
    char *v = argv[++i];
    if (same(opt, "--target")) {
      if (target || !number(v, 2, 4194304, &value)) usage("--target takes the host pid of the sandbox's first process (not 0 or 1): ", v);
      target = v;
    } else if (same(opt, "--label")) {
      label = v;
    } else if (same(opt, "--uid")) {
      if (uid >= 0 || !number(v, 1, 4294967294L, &uid)) usage("--uid takes the workshop's host uid (never 0), once: ", v);
    } else if (same(opt, "--oom-score-adj")) {
      if (!number(v, -1000, 1000, &value)) usage("--oom-score-adj takes a number from -1000 to 1000: ", v);
      oom = v;
    } else if (same(opt, "--cgroup")) {
      if (v[0] != '/') usage("--cgroup takes the absolute path of a cgroup.procs file: ", v);
      if (ncgroups == MAX_CGROUPS) usage("too many --cgroup", "");
      cgroups[ncgroups++] = v;
    } else if (same(opt, "--cwd")) {
      if (cwd || v[0] != '/' || len(v) >= 4096) usage("--cwd takes one absolute directory inside the sandbox: ", v);
      cwd = v;
    } else {
      usage("unknown option ", opt);
    }
  }
  if (!target) usage("missing --target", "");
  if (!cwd) usage("missing --cwd", "");
  if (rootless == (uid >= 0)) usage("give exactly one of --uid UID (a root server) or --rootless", "");
  if (i + 1 >= argc) usage("missing the command after --", "");
  char **command = argv + i + 1;

  /* 1. OOM score (as the shell's `echo`, failure ignored: it is a preference), then the cgroups. */
  if (oom) put("/proc/self/oom_score_adj", oom);
  char pidbuf[24];
  char *self = decimal(sys(__NR_getpid, 0, 0, 0), pidbuf + sizeof(pidbuf));
  for (int c = 0; c < ncgroups; c++) {
    long r = put(cgroups[c], self);
    if (r < 0) die(111, "cannot join the workshop's cgroup ", cgroups[c], ": ", why(r));
    wipe(cgroups[c]);
  }

  /* 2. The namespaces: all opened, then entered. */
  if (shared_ns(target, "mnt") || shared_ns(target, "pid"))
    die(FAILED, "process ", target, " is not a sandbox's: it shares this host's mount or PID namespace", "");
  long fds[NS_COUNT];
  char path[64];
  for (unsigned n = 0; n < NS_COUNT; n++) {
    fds[n] = -1;
    if (NAMESPACES[n].when != ALWAYS && NAMESPACES[n].when != (rootless ? ROOTLESS_ONLY : ROOT_ONLY)) continue;
    fds[n] = sys(__NR_open, (long)ns_path(path, target, NAMESPACES[n].name), O_RDONLY | O_CLOEXEC, 0);
    if (fds[n] < 0) die(FAILED, "cannot open ", path, ": ", why(fds[n]));
  }
  long r;
  for (unsigned n = 0; n < NS_COUNT; n++) {
    if (fds[n] < 0) continue;
    r = sys(__NR_setns, fds[n], NAMESPACES[n].type, 0);
    if (r != 0) die(FAILED, "cannot enter the sandbox's ", NAMESPACES[n].name, " namespace: ", why(r));
    sys(__NR_close, fds[n], 0, 0);
  }

  /*
   * A sandbox started by a server from before the system-call filter has no loader at
   * /run/seccomp-exec (SECCOMP_EXEC in seccomp.ts), and its own processes run unfiltered: one of
   * them, traced by the command, would do what the filter refuses. Entering it is refused, as
   * nsenter's chain failed to run the loader there.
   */
  if ((r = sys(__NR_access, (long)"/run/seccomp-exec", X_OK, 0)) != 0)
    die(FAILED, "this workshop's sandbox was started without the system-call filter (no /run/seccomp-exec: ", why(r),
        "): recreate the workshop", "");

  /* 3. Into the PID namespace. */
  long child = sys(__NR_fork, 0, 0, 0);
  if (child < 0) die(FAILED, "cannot start a process in the sandbox: ", why(child), "", "");
  if (child > 0) wait_for(child);
  /* The label is for the host's eyes only (the server finds its entries by it). */
  wipe(target);
  if (label) wipe(label);

  /* 4. The system-call filter, still privileged. */
  struct sock_fprog filter = {
      .len = (unsigned short)(sizeof(ATELIER_FILTER) / sizeof(ATELIER_FILTER[0])),
      .filter = ATELIER_FILTER,
  };
  r = sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0);
  if (r != 0) die(FAILED, "no_new_privs: ", why(r), "", "");
  r = sys(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&filter);
  if (r != 0) die(FAILED, "the kernel refused the system-call filter: ", why(r), "", "");

  /* 5. The privilege drop. */
  for (long cap = 0;; cap++) {
    r = sys(__NR_prctl, PR_CAPBSET_DROP, cap, 0);
    if (r == -EINVAL) break; /* past the kernel's last capability */
    if (r != 0) die(FAILED, "cannot empty the capability bounding set: ", why(r), "", "");
  }
  if (!rootless) {
    if ((r = sys(__NR_setgroups, 0, 0, 0)) != 0) die(FAILED, "setgroups: ", why(r), "", "");
    if ((r = sys(__NR_setresgid, uid, uid, uid)) != 0) die(FAILED, "setresgid: ", why(r), "", "");
    if ((r = sys(__NR_setresuid, uid, uid, uid)) != 0) die(FAILED, "setresuid: ", why(r), "", "");
  }
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {{0, 0, 0}, {0, 0, 0}};
  if ((r = sys(__NR_capset, (long)&header, (long)none, 0)) != 0) die(FAILED, "capset: ", why(r), "", "");
  if ((r = sys(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0)) != 0) die(FAILED, "ambient capabilities: ", why(r), "", "");

  /* 6. The working directory, as the workshop. */
  if ((r = sys(__NR_chdir, (long)cwd, 0, 0)) != 0) die(126, "cd ", cwd, ": ", why(r));

  /* 7. The workshop's environment, in place of ours (the array is reused: it only shrinks). */
  const unsigned long plen = sizeof(ENV_PREFIX) - 1;
  char **out = envp, **e = envp;
  int has_pwd = 0;
  for (; *e; e++) {
    unsigned long k = 0;
    while (k < plen && (*e)[k] == ENV_PREFIX[k]) k++;
    if (k < plen || !(*e)[plen] || (*e)[plen] == '=') continue;
    char *var = *e + plen;
    if (var[0] == 'P' && var[1] == 'W' && var[2] == 'D' && var[3] == '=') has_pwd = 1;
    *out++ = var;
  }
  /* PWD, as the shell that applied the environment before exported it (a slot is free: PATH's). */
  char pwd[4 + 4096];
  if (!has_pwd && out < e) {
    for (unsigned long k = 0; k < 4; k++) pwd[k] = "PWD="[k];
    for (unsigned long k = 0; k <= len(cwd); k++) pwd[4 + k] = cwd[k];
    *out++ = pwd;
  }
  *out = 0;

  /* 8. The command (the two slots of argv before it, `--` and an option's value, are free for a script's /bin/sh). */
  r = run(command, envp, DEFAULT_PATH, 1);
  die(r == -ENOENT ? 127 : 126, command[0], ": ", r == -ENOENT ? "command not found" : why(r), "");
}

// The process's entry point: the stack holds argc, argv and the environment. Aligned for the call.
__asm__(".text\n.globl _start\n_start:\n  mov %rsp, %rdi\n  and $-16, %rsp\n  call start\n  hlt\n");
