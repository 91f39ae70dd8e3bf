// A FAKE `docker` executable: there is no Docker engine on this machine, so the compose backend
// is driven against this stand-in. It answers the few `docker compose` sub-commands the backend
// runs the way Compose v2 does (`version --short`, `up -d [--force-recreate]`, `stop`, `restart`,
// `ps --all --format json` one object per line, `exec -T SERVICE redis-cli ping`), keeps the
// containers' state in a JSON file, and records every argv it is given, so a test can check the
// exact commands the server ran. It refuses (exit 99) any volume-deleting form.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface FakeContainer {
  id: string;
  service: string;
  state: 'running' | 'exited';
  restart: string;
  volume: string;
  file: string;
}

export interface FakeDocker {
  /** The directory to put first on PATH. */
  dir: string;
  /** Every argv the fake was run with (without the leading `docker`). */
  calls(): string[][];
  /** Containers by compose project name. */
  containers(): Record<string, FakeContainer>;
  /** Volumes ever created (the fake never deletes one). */
  volumes(): string[];
  /** The next call of this compose sub-command fails (exit 1) once. */
  failNext(subcommand: string): void;
}

const SCRIPT = String.raw`
const fs = require('node:fs');
const path = require('node:path');
const dir = __dirname;
const args = process.argv.slice(2);
fs.appendFileSync(path.join(dir, 'calls.jsonl'), JSON.stringify(args) + '\n');
const stateFile = path.join(dir, 'state.json');
const state = fs.existsSync(stateFile) ? JSON.parse(fs.readFileSync(stateFile, 'utf8')) : { containers: {}, volumes: [], seq: 0 };
const save = () => fs.writeFileSync(stateFile, JSON.stringify(state));
const die = (code, msg) => { process.stderr.write(msg + '\n'); process.exit(code); };
const FORBIDDEN = ['-v', '--volumes', '-V', '--renew-anon-volumes', 'down', 'rm', '--rmi'];
for (const a of args) if (FORBIDDEN.includes(a)) die(99, 'fake docker: refused a volume-deleting form: ' + a);
if (args[0] !== 'compose') die(125, 'fake docker: only "docker compose" is faked, got ' + args.join(' '));
let i = 1, file, project;
for (; i < args.length; i++) {
  if (args[i] === '-f' || args[i] === '--file') file = args[++i];
  else if (args[i] === '-p' || args[i] === '--project-name') project = args[++i];
  else break;
}
const sub = args[i], rest = args.slice(i + 1);
const failFile = path.join(dir, 'fail-next');
if (fs.existsSync(failFile) && fs.readFileSync(failFile, 'utf8') === sub) { fs.rmSync(failFile); die(1, 'fake docker: ' + sub + ' failed as the test asked'); }
if (sub === 'version') { process.stdout.write(rest.includes('--short') ? '2.29.7\n' : 'Docker Compose version v2.29.7\n'); process.exit(0); }
if (!file || !project) die(1, 'fake docker: -f FILE and -p NAME are expected');
if (!fs.existsSync(file)) die(14, 'open ' + file + ': no such file or directory');
const text = fs.readFileSync(file, 'utf8');
const service = (/^services:\s*\n\s+([a-z0-9_-]+):/m.exec(text) || [])[1];
const restart = ((/^\s+restart:\s*(\S+)/m.exec(text) || [])[1] || 'no').replace(/['"]/g, '');
const volume = project + '_' + ((/^volumes:\s*\n\s+([A-Za-z0-9_.-]+):/m.exec(text) || [])[1] || 'none');
const c = state.containers[project];
const create = () => {
  if (!state.volumes.includes(volume)) state.volumes.push(volume);
  state.containers[project] = { id: 'c' + ++state.seq, service, state: 'running', restart, volume, file };
};
switch (sub) {
  case 'up':
    if (!rest.includes('-d')) die(1, 'fake docker: only detached up is faked');
    if (!c || rest.includes('--force-recreate') || c.restart !== restart) create();
    else c.state = 'running';
    save();
    process.stderr.write(' Container ' + project + '-' + service + '-1  Started\n');
    break;
  case 'stop':
    if (c) c.state = 'exited';
    save();
    break;
  case 'restart':
    if (c) c.state = 'running';
    save();
    break;
  case 'ps':
    if (!(rest.includes('--format') && rest.includes('json'))) die(1, 'fake docker: ps is faked only with --format json');
    if (c && (c.state === 'running' || rest.includes('--all')))
      process.stdout.write(JSON.stringify({ ID: c.id, Name: project + '-' + c.service + '-1', Project: project, Service: c.service, State: c.state, Status: c.state === 'running' ? 'Up 1 second' : 'Exited (0)' }) + '\n');
    break;
  case 'exec':
    if (rest[0] !== '-T' || rest[1] !== service) die(1, 'fake docker: exec -T ' + service + ' expected');
    if (!c || c.state !== 'running') die(1, 'service "' + service + '" is not running');
    if (rest.slice(2).join(' ') === 'redis-cli ping') { process.stdout.write('PONG\n'); break; }
    die(1, 'fake docker: only redis-cli ping is faked');
  default:
    die(1, 'fake docker: unsupported compose sub-command ' + sub);
}
`;

/** Writes the fake `docker` into `dir` (created) and returns how to read what it saw. */
export function createFakeDocker(dir: string): FakeDocker {
  mkdirSync(dir, { recursive: true });
  // CommonJS beside no package.json: the fake runs under the test's own node.
  writeFileSync(join(dir, 'fake-docker.cjs'), SCRIPT);
  writeFileSync(join(dir, 'docker'), `#!/bin/sh\nexec '${process.execPath}' '${join(dir, 'fake-docker.cjs')}' "$@"\n`);
  chmodSync(join(dir, 'docker'), 0o755);
  const state = (): { containers: Record<string, FakeContainer>; volumes: string[] } =>
    existsSync(join(dir, 'state.json')) ? JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) : { containers: {}, volumes: [] };
  return {
    dir,
    calls: () =>
      existsSync(join(dir, 'calls.jsonl'))
        ? readFileSync(join(dir, 'calls.jsonl'), 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as string[])
        : [],
    containers: () => state().containers,
    volumes: () => state().volumes,
    failNext: (subcommand) => writeFileSync(join(dir, 'fail-next'), subcommand),
  };
}
