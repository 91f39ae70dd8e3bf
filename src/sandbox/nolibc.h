/*
 * What seccomp-exec.c and sandbox-enter.c share: system calls without a C library, a few string
 * helpers, error messages, and the PATH search of execvp. Each program runs on every entry into
 * a workshop (or every simulator process), so neither links a libc: a static glibc's start-up
 * alone cost ~0.7 ms per exec here; these start in ~0.05 ms. x86_64 only (the server refuses to
 * start elsewhere).
 */
#ifndef ATELIER_NOLIBC_H
#define ATELIER_NOLIBC_H

#include <linux/errno.h>
#include <asm/unistd.h>

/* The program's name in its messages: each program defines PROGRAM_NAME before including this. */
#ifndef PROGRAM_NAME
#error "define PROGRAM_NAME"
#endif

/* A system call with up to six arguments. */
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
  long r;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
  return r;
}

/* Up to three arguments; the others are 0 (prctl checks that its unused ones are). */
static long sys(long n, long a, long b, long c) {
  return sys6(n, a, b, c, 0, 0, 0);
}

static unsigned long len(const char *s) {
  unsigned long n = 0;
  while (s[n]) n++;
  return n;
}

static __attribute__((unused)) int same(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

/* One line on stderr: the program's name, then the parts. */
static void say(const char *a, const char *b, const char *c, const char *d) {
  const char *parts[] = {PROGRAM_NAME, ": ", a, b, c, d, "\n"};
  for (unsigned i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) sys(__NR_write, 2, (long)parts[i], (long)len(parts[i]));
}

static __attribute__((noreturn)) void die(int code, const char *a, const char *b, const char *c, const char *d) {
  say(a, b, c, d);
  for (;;) sys(__NR_exit_group, code, 0, 0);
}

static const char *why(long err) {
  switch (-err) {
    case ENOENT:
      return "no such file or directory";
    case ENOTDIR:
      return "not a directory";
    case EACCES:
      return "permission denied";
    case ENOEXEC:
      return "not an executable";
    case EINVAL:
      return "invalid argument";
    case EPERM:
      return "operation not permitted";
    case ESRCH:
      return "no such process";
    case ENOMEM:
      return "out of memory (or the namespace's first process is gone)";
    case E2BIG:
      return "argument list too long";
    case ELOOP:
      return "too many levels of symbolic links";
    case ENAMETOOLONG:
      return "file name too long";
    case EAGAIN:
      return "resource temporarily unavailable (a process limit?)";
    default:
      return "failed";
  }
}

/*
 * As execvp: PROGRAM (argv[0]) as given when it has a slash, else each directory of the PATH in
 * `envp` (or `fallback` when it has none) in turn: past a directory that lacks it or may not be
 * searched, stopping at any other error. Returns the error when nothing ran. With `script_slots`
 * (argv[-2] and argv[-1] are ours to overwrite), a file the kernel does not take as an executable
 * (ENOEXEC, a script without `#!`) runs under /bin/sh, as execvp and every shell do.
 */
static long run(char **argv, char **envp, const char *fallback, int script_slots) {
  const char *prog = argv[0];
  char buf[4096];
  long err = -ENOENT;
  int slash = 0;
  for (const char *p = prog; *p; p++)
    if (*p == '/') slash = 1;
  const char *path = fallback;
  for (char **e = envp; *e; e++)
    if ((*e)[0] == 'P' && (*e)[1] == 'A' && (*e)[2] == 'T' && (*e)[3] == 'H' && (*e)[4] == '=') path = *e + 5;
  unsigned long n = len(prog);
  for (const char *dir = path;;) {
    const char *end = dir;
    const char *file = prog;
    if (!slash) {
      while (*end && *end != ':') end++;
      unsigned long d = (unsigned long)(end - dir);
      file = 0;
      if (n > 0 && d + 1 + n + 1 <= sizeof(buf)) {
        unsigned long i = 0;
        for (; i < d; i++) buf[i] = dir[i];
        if (d > 0) buf[i++] = '/';
        for (unsigned long j = 0; j <= n; j++) buf[i + j] = prog[j];
        file = buf;
      }
    }
    if (file) {
      long r = sys(__NR_execve, (long)file, (long)argv, (long)envp);
      if (r == -ENOEXEC && script_slots) {
        argv[-1] = (char *)file;
        argv[-2] = "/bin/sh";
        r = sys(__NR_execve, (long)argv[-2], (long)(argv - 2), (long)envp);
        argv[-1] = argv[-2] = 0;
        if (r == -ENOENT) r = -ENOEXEC;
      }
      if (slash) return r;
      if (r == -EACCES) err = r;
      else if (r != -ENOENT && r != -ENOTDIR) return r;
    }
    if (slash || !*end) return err;
    dir = end + 1;
  }
}

#endif
