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
#include <linux/filter.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>

#define PROGRAM_NAME "seccomp-exec"
#include "nolibc.h"
#include "seccomp-filter.h"

__attribute__((used)) static void start(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  char **envp = argv + argc + 1;
  if (argc < 2) die(127, "usage: seccomp-exec PROGRAM [ARG...]", "", "", "");
  struct sock_fprog prog = {
      .len = (unsigned short)(sizeof(ATELIER_FILTER) / sizeof(ATELIER_FILTER[0])),
      .filter = ATELIER_FILTER,
  };
  // Required without CAP_SYS_ADMIN, and wanted anyway: nothing after this gains privileges by exec.
  long r = sys(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0);
  if (r != 0) die(126, "no_new_privs: ", why(r), "", "");
  r = sys(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, (long)&prog);
  if (r != 0) die(126, "the kernel refused the system-call filter: ", why(r), "", "");
  r = run(argv + 1, envp, "/usr/local/bin:/usr/bin:/bin", 0);
  die(r == -ENOENT ? 127 : 126, argv[1], ": ", why(r), "");
}

// The process's entry point: the stack holds argc, argv and the environment. Aligned for the call.
__asm__(".text\n.globl _start\n_start:\n  mov %rsp, %rdi\n  and $-16, %rsp\n  call start\n  hlt\n");
