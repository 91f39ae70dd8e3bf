/*
 * seccomp-exec PROGRAM [ARG...]: installs Atelier's system-call filter, then execs PROGRAM.
 *
 * The filter is the one in seccompProfile.ts, compiled to classic BPF at build time and included
 * here as a constant (seccomp-filter.h, made by scripts/build-seccomp.mjs): no file to read, no
 * library, nothing to parse at run time. Built static, so that it costs one exec and two system
 * calls (well under a millisecond) on every entry into a workshop; a Python loader costs ~20 ms.
 *
 * A process that enters a sandbox with nsenter does not inherit the filter of the sandbox's init,
 * so the server runs this on every entry, while still privileged (before setpriv drops to the
 * workshop's uid): no process of the workshop's uid ever runs without the filter, so none can be
 * traced or written to (/proc/PID/mem) before the filter is in place.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "seccomp-filter.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs("usage: seccomp-exec PROGRAM [ARG...]\n", stderr);
    return 127;
  }
  struct sock_fprog prog = {
      .len = (unsigned short)(sizeof(ATELIER_FILTER) / sizeof(ATELIER_FILTER[0])),
      .filter = ATELIER_FILTER,
  };
  // Required without CAP_SYS_ADMIN, and wanted anyway: nothing after this gains privileges by exec.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    fprintf(stderr, "seccomp-exec: no_new_privs: %s\n", strerror(errno));
    return 126;
  }
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    fprintf(stderr, "seccomp-exec: the kernel refused the system-call filter: %s\n", strerror(errno));
    return 126;
  }
  execvp(argv[1], argv + 1);
  int err = errno;
  fprintf(stderr, "seccomp-exec: %s: %s\n", argv[1], strerror(err));
  return err == ENOENT ? 127 : 126;
}
