// Calls each named system call with arguments that are harmless on any kernel, and prints
// "name ok" or "name ERRNO", each in a child of its own (one probe cannot change the next one's
// conditions). Used by test/seccomp.test.ts inside workshops and, as a control, outside.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static long clone_flags(long flags) {
  long pid = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid(pid, 0, 0);
  return pid;
}
static void *thread_main(void *arg) { return arg; }
static long thread(void) {
  pthread_t t;
  int e = pthread_create(&t, 0, thread_main, 0);
  if (e) { errno = e; return -1; }
  return pthread_join(t, 0);
}
static long i386_getpid(void) {
  long r;
  __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
  if (r < 0 && r > -4096) { errno = (int)-r; return -1; }
  return r;
}

int main(int argc, char **argv) {
  setvbuf(stdout, 0, _IONBF, 0);
  for (int i = 1; i < argc; i++) {
    const char *n = argv[i];
    long v;
    pid_t child = fork();
    if (child < 0) return 3;
    if (child > 0) {
      int status;
      waitpid(child, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) printf("%s died\n", n);
      continue;
    }
    errno = 0;
#define P(name, expr) else if (!strcmp(n, name)) v = (expr)
    if (0) v = 0;
    P("unshare", syscall(SYS_unshare, 0x10000000L));
    P("setns", syscall(SYS_setns, -1, 0));
    P("clone_newuser", clone_flags(0x10000000L));
    P("clone_newns", clone_flags(0x00020000L));
    P("clone3", syscall(SYS_clone3, 0, 0));
    P("fork", clone_flags(0));
    P("thread", thread());
    P("mount", syscall(SYS_mount, 0, 0, 0, 0, 0));
    P("umount2", syscall(SYS_umount2, 0, 0xffff));
    P("pivot_root", syscall(SYS_pivot_root, 0, 0));
    P("chroot", syscall(SYS_chroot, 0));
    P("open_tree", syscall(SYS_open_tree, -1, 0, ~0U));
    P("fsopen", syscall(SYS_fsopen, 0, 0));
    P("add_key", syscall(SYS_add_key, 0, 0, 0, 0, 0));
    P("keyctl", syscall(SYS_keyctl, -1, 0, 0, 0, 0));
    P("request_key", syscall(SYS_request_key, 0, 0, 0, 0));
    P("bpf", syscall(SYS_bpf, -1, 0, 0));
    P("perf_event_open", syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
    P("userfaultfd", syscall(SYS_userfaultfd, 1));
    P("io_uring_setup", syscall(SYS_io_uring_setup, 1, 0));
    P("kexec_load", syscall(SYS_kexec_load, 0, 0, 0, 0xffffffffUL));
    P("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, 0, 0xffffffffUL));
    P("init_module", syscall(SYS_init_module, 0, 0, 0));
    P("finit_module", syscall(SYS_finit_module, -1, 0, 0));
    P("delete_module", syscall(SYS_delete_module, 0, 0));
    P("kcmp", syscall(SYS_kcmp, getpid(), getpid(), 0, 0, 0));
    P("pidfd_getfd", syscall(SYS_pidfd_getfd, -1, 0, 0));
    P("process_madvise", syscall(SYS_process_madvise, -1, 0, 0, 0, 0));
    P("ptrace_init", syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, 1, 0, 0));
    P("swapon", syscall(SYS_swapon, 0, 0));
    P("reboot", syscall(SYS_reboot, 0, 0, 0, 0));
    P("sethostname", syscall(SYS_sethostname, 0, 100000));
    P("acct", syscall(SYS_acct, 1));
    P("syslog", syscall(SYS_syslog, 10, 0, 0));
    P("settimeofday", syscall(SYS_settimeofday, 0, 0));
    P("clock_settime", syscall(SYS_clock_settime, 0, 0));
    P("iopl", syscall(SYS_iopl, 0));
    P("ioperm", syscall(SYS_ioperm, 0, 0, 0));
    P("modify_ldt", syscall(SYS_modify_ldt, 0, 0, 0));
    P("mbind", syscall(SYS_mbind, 0, 0, 0, 0, 0, 0));
    P("get_mempolicy", syscall(SYS_get_mempolicy, 0, 0, 0, 0, 0));
    P("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, 0, 0));
    P("personality_norandom", syscall(SYS_personality, 0x0040000));
    P("personality_query", syscall(SYS_personality, 0xffffffffUL));
    P("socket_vsock", socket(40, SOCK_STREAM, 0));
    P("socket_alg", socket(38, SOCK_SEQPACKET, 0));
    P("socket_inet", socket(AF_INET, SOCK_STREAM, 0));
    P("socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
    P("i386_getpid", i386_getpid());
    P("x32_getpid", syscall(39 | 0x40000000L));
    P("fchmodat2", syscall(452, -1, "x", 0, 0));
    else { fprintf(stderr, "unknown probe %s\n", n); return 2; }
    printf("%s %s\n", n, v == -1 ? strerrorname_np(errno) : "ok");
    _exit(0);
  }
  return 0;
}
