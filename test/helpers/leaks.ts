// Looking for a secret where it must not be: inside a workshop (its files and every process's
// environment and command line) and in the files a server wrote. Shared by the tests of the
// credential broker and the LLM gateway.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A shell script for inside a workshop that prints `files:` (the files under /workspace, /tmp,
 * /home, /run and /etc matching `pattern`) and `procs:` (how many process environments and
 * command lines match). Give a pattern that does not match itself, such as `gh[p]_`, so that
 * the script's own command line is not counted.
 */
export function insideSearch(pattern: string): string {
  return (
    `echo "files:$(grep -rIl '${pattern}' /workspace /tmp /home /run /etc 2>/dev/null)"; ` +
    `echo "procs:$(for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; done | tr '\\0' '\\n' | grep -c '${pattern}')"`
  );
}

/** The files under `dir` (the database's and workshops' own files aside, and nothing over 8 MiB) that hold any of `needles` in clear. */
export function filesHolding(dir: string, needles: readonly string[]): string[] {
  const found: string[] = [];
  const walk = (d: string): void => {
    let entries: string[];
    try {
      entries = readdirSync(d);
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(d, e);
      let st;
      try {
        st = statSync(p);
      } catch {
        continue;
      }
      if (st.isDirectory()) {
        if (!p.includes('/postgres') && !p.includes('/workshops/')) walk(p);
      } else if (st.isFile() && st.size < 8 << 20) {
        const text = readFileSync(p);
        if (needles.some((n) => text.includes(n))) found.push(p);
      }
    }
  };
  walk(dir);
  return found;
}
