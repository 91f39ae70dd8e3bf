// `npm run lint:py`: the python helpers under src/ must compile with the interpreter that runs
// them (/usr/bin/python3, Debian's) and pass pyflakes (Debian's python3-pyflakes, in
// scripts/install.sh). Compiled in memory, as py_compile would, without writing .pyc files into src/.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const PYTHON = '/usr/bin/python3';

function find(dir, out = []) {
  for (const entry of readdirSync(dir).sort()) {
    const full = join(dir, entry);
    if (statSync(full).isDirectory()) find(full, out);
    else if (entry.endsWith('.py')) out.push(full);
  }
  return out;
}

const files = find('src');
const run = (args) => spawnSync(PYTHON, args, { stdio: 'inherit' }).status;
const compile = "import sys\nfor f in sys.argv[1:]:\n    compile(open(f, 'rb').read(), f, 'exec', dont_inherit=True)\n";
if (run(['-B', '-I', '-c', compile, ...files]) !== 0) process.exit(1);
if (spawnSync(PYTHON, ['-I', '-c', 'import pyflakes'], { stdio: 'ignore' }).status !== 0) {
  process.stderr.write('lint:py needs pyflakes for /usr/bin/python3: sudo apt-get install -y python3-pyflakes (scripts/install.sh does)\n');
  process.exit(1);
}
if (run(['-B', '-I', '-m', 'pyflakes', ...files]) !== 0) process.exit(1);
console.log(`lint:py: ${files.length} python helpers compile and pass pyflakes`);
