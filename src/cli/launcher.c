/*
 * A release's bin/atelier (scripts/release.mjs builds it): runs bin/atelier.cjs beside it with the
 * Node.js shipped in the release, as `RELEASE/node/bin/node RELEASE/bin/atelier.cjs ARGS...`.
 *
 * /usr/local/bin/atelier links to RELEASE/bin/atelier (through `current`), so the release is found
 * from the launcher's own real path, /proc/self/exe. A program rather than a /bin/sh script: the
 * script cost a shell and a `readlink -f` fork before Node (~3 ms of every command's start, issue
 * 20), this costs one exec.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self);
  if (n <= 0 || (size_t)n >= sizeof self) {
    fprintf(stderr, "atelier: cannot find this release (/proc/self/exe: %s): is /proc mounted?\n", n < 0 ? strerror(errno) : "too long");
    return 127;
  }
  self[n] = '\0';
  /* RELEASE/bin/atelier -> RELEASE/bin */
  char *slash = strrchr(self, '/');
  if (slash == NULL) return 127;
  *slash = '\0';
  char node[PATH_MAX];
  char script[PATH_MAX];
  if (snprintf(node, sizeof node, "%s/../node/bin/node", self) >= (int)sizeof node ||
      snprintf(script, sizeof script, "%s/atelier.cjs", self) >= (int)sizeof script) {
    fprintf(stderr, "atelier: the path of this release is too long: %s\n", self);
    return 127;
  }
  char **args = calloc((size_t)argc + 2, sizeof *args);
  if (args == NULL) return 127;
  args[0] = node;
  args[1] = script;
  for (int i = 1; i < argc; i++) args[i + 1] = argv[i];
  args[argc + 1] = NULL;
  execv(node, args);
  fprintf(stderr, "atelier: cannot run %s: %s\n", node, strerror(errno));
  return 127;
}
