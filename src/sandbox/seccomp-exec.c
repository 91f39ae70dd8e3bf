/*
 * seccomp-exec PROGRAM [ARG...]: installs Atelier's system-call filter, then execs PROGRAM
 * (looked up in PATH when it has no slash, as execvp does).
 *
 * The filter is the one in seccompProfile.ts, compiled to classic BPF at build time and included
 * here as a constant (seccomp-filter.h, made by scripts/build-seccomp.mjs): no file to read, no
 * library, nothing to parse at run time. It runs on every entry into a workshop, so it is as
 * cheap as a program can be: no C library at all (a static glibc's start-up alone cost ~0.7 ms
 * per exec here; this costs ~0.05 ms plus the kernel's ~0.2 ms to install the filter), built
 * static without position independence, three system calls. A Python loader costs ~20 ms.
 *
 * A process that enters a sandbox with nsenter does not inherit the filter of the sandbox's init,
 * so the server runs this on every entry, while still privileged (before setpriv drops to the
 * workshop's uid): no process of the workshop's uid ever runs without the filter, so none can be
 * traced or written to (/proc/PID/mem) before the filter is in place.
 */
#include <linux/errno.h>
#include <linux/filter.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>
#include <asm/unistd.h>

#include "seccomp-filter.h"

/* A system call with up to three arguments; the fourth and fifth are 0 (prctl checks that they are). */
static long sys(long n, long a, long b, long c) {
  long r;
  register long r10 __asm__("r10") = 0;
  register long r8 __asm__("r8") = 0;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8) : "rcx", "r11", "memory");
  return r;
}

static unsigned long len(const char *s) {
  unsigned long n = 0;
  while (s[n]) n++;
  return n;
}

static void say(const char *a, const char *b, const char *c) {
  const char *parts[] = {"seccomp-exec: ", a, b, c, "\n"};
  for (unsigned i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) sys(__NR_write, 2, (long)parts[i], (long)len(parts[i]));
}

static __attribute__((noreturn)) void die(int code, const char *a, const char *b, const char *c) {
  say(a, b, c);
  for (;;) sys(__NR_exit_group, code, 0, 0);
}

static const char *why(long err) {
  switch (-err) {
    case ENOENT:
      return "no such file or directory";
    case EACCES:
      return "permission denied";
    case ENOEXEC:
      return "not an executable";
    case EINVAL:
      return "invalid argument";
    case EPERM:
      return "operation not permitted";
    default:
      return "cannot execute";
  }
}

/* As execvp: PROGRAM as given when it has a slash, else the first directory of PATH that has it. */
static long run(char **argv, char **envp) {
  const char *prog = argv[0];
  for (const char *p = prog; *p; p++)
    if (*p == '/') return sys(__NR_execve, (long)prog, (long)argv, (long)envp);
  const char *path = "/usr/local/bin:/usr/bin:/bin";
  for (char **e = envp; *e; e++)
    if ((*e)[0] == 'P' && (*e)[1] == 'A' && (*e)[2] == 'T' && (*e)[3] == 'H' && (*e)[4] == '=') path = *e + 5;
  unsigned long n = len(prog);
  long err = -ENOENT;
  char buf[4096];
  for (const char *dir = path;;) {
    const char *end = dir;
    while (*end && *end != ':') end++;
    unsigned long d = (unsigned long)(end - dir);
    if (d + 1 + n + 1 <= sizeof(buf)) {
      unsigned long i = 0;
      for (; i < d; i++) buf[i] = dir[i];
      if (d > 0) buf[i++] = '/';
      for (unsigned long j = 0; j <= n; j++) buf[i + j] = prog[j];
      long r = sys(__NR_execve, (long)buf, (long)argv, (long)envp);
      // As execvp: look further past a directory that lacks it or may not be searched; stop at anything else.
      if (r == -EACCES) err = r;
      else if (r != -ENOENT && r != -ENOTDIR) return r;
    }
    if (!*end) return err;
    dir = end + 1;
  }
}

__attribute__((used)) static void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  char **envp = argv + argc + 1;
  if (argc < 2) die(127, "usage: seccomp-exec PROGRAM [ARG...]", "", "");
  struct sock_fprog prog = {
      .len = (unsigned short)(sizeof(ATELIER_FILTER) / sizeof(ATELIER_FILTER[0])),
      .filter = ATELIER_FILTER,
  };
  // Required without CAP_SYS_ADMIN, and wanted anyway: nothing after this gains privileges by exec.
  long r = sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0);
  if (r != 0) die(126, "no_new_privs: ", why(r), "");
  r = sys(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&prog);
  if (r != 0) die(126, "the kernel refused the system-call filter: ", why(r), "");
  r = run(argv + 1, envp);
  die(r == -ENOENT ? 127 : 126, argv[1], ": ", why(r));
}

// The process's entry point: the stack holds argc, argv and the environment. Aligned for the call.
__asm__(".text\n.globl _start\n_start:\n  mov %rsp, %rdi\n  and $-16, %rsp\n  call start\n  hlt\n");
