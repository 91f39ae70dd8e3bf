import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The python helpers (netns-listen.py, netns-connector.py, splice-relay.py) share modules that
 * live in one directory, this folder (node_ipc.py: Node's IPC wire format). They run as root
 * with `python3 -I -S`, which ignores PYTHONPATH and never puts the script's own directory on the
 * path (so nothing of the caller's environment or working directory is imported), hence a
 * variable of ours: whoever starts a helper names the directory in ATELIER_PYTHON_LIB, and the
 * helper's one path line is `sys.path.insert(0, os.environ["ATELIER_PYTHON_LIB"])`, the only
 * sys.path change test/layering.test.ts allows. No helper finds another's file by a relative path.
 */
export const PYTHON_LIB_VARIABLE = 'ATELIER_PYTHON_LIB';

let found: string | undefined;

/** The directory of the shared python modules: beside this module (src/core, dist/core), or in dist/core from the CLI's bundle. */
export function pythonLibDir(): string {
  if (found) return found;
  for (const url of [new URL('./node_ipc.py', import.meta.url), new URL('../core/node_ipc.py', import.meta.url)]) {
    const path = fileURLToPath(url);
    if (existsSync(path)) return (found = dirname(path));
  }
  throw new Error('node_ipc.py is missing beside the compiled core: run `npm run build`');
}

/** The environment entry a python helper needs to import the shared modules. */
export function pythonLibEnv(): Record<string, string> {
  return { [PYTHON_LIB_VARIABLE]: pythonLibDir() };
}
