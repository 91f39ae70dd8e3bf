/**
 * Atelier benchmarks, each beside its peer measured in the same run (DESIGN.md, "Peers to
 * measure against"). Usage: `npm run bench [-- NAME]` with NAME one of create, exec, resume,
 * memory, cli, egress, postgres-sim, terminals, approvals, mcp, secrets, broker (or 1-12), hogs (13), gateway (14), create-sims, live-sim, console, dashboard, nodes (15), doctor (16), kubernetes (17); without it, all of them. Needs root (cgroups, freezer) and `npm run
 * build` first: the server and the CLI run from dist/.
 *
 * One server is started for the run with a data dir under /tmp; every workshop it made is
 * deleted and the server stopped (SIGTERM) at the end, also on failure or Ctrl-C.
 * Results are printed and also written to bench/results/<time>.json (git-ignored).
 */
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { approvals } from './approvals.js';
import { broker } from './broker.js';
import { gateway } from './gateway.js';
import { createExec } from './create-exec.js';
import { dashboard } from './dashboard.js';
import { doctor } from './doctor.js';
import { createSimulators, liveSimulator } from './create-simulators.js';
import { cliStart } from './cli-start.js';
import { consoleBench } from './console.js';
import { egress } from './egress.js';
import { execRoundTrip } from './exec-roundtrip.js';
import { hogs } from './hogs.js';
import { kubernetes } from './kubernetes.js';
import { BenchServer, killLiveChildren, makeScratch, REPO_ROOT, removeScratch, type Scratch } from './lib.js';
import { memory } from './memory.js';
import { nodes } from './nodes.js';
import { mcpExec } from './mcp-exec.js';
import { resumeExec } from './resume-exec.js';
import { secrets } from './secrets.js';
import { postgresSimulator } from './simulators.js';
import { terminals } from './terminals.js';

type Bench = (server: BenchServer) => Promise<Record<string, unknown>>;

const BENCHES: { name: string; aliases: string[]; fn: Bench }[] = [
  { name: 'create', aliases: ['1', 'create-exec'], fn: createExec },
  { name: 'exec', aliases: ['2', 'exec-roundtrip'], fn: execRoundTrip },
  { name: 'resume', aliases: ['3', 'resume-exec'], fn: resumeExec },
  { name: 'memory', aliases: ['4', 'mem'], fn: memory },
  { name: 'cli', aliases: ['5', 'cli-start'], fn: cliStart },
  { name: 'egress', aliases: ['6', 'proxy'], fn: egress },
  { name: 'postgres-sim', aliases: ['7', 'simulators', 'pg-sim'], fn: postgresSimulator },
  { name: 'terminals', aliases: ['8', 'port-forward', 'pty'], fn: terminals },
  { name: 'approvals', aliases: ['9', 'hitl'], fn: approvals },
  { name: 'mcp', aliases: ['10', 'mcp-exec'], fn: mcpExec },
  { name: 'create-sims', aliases: ['create-simulators'], fn: createSimulators },
  { name: 'live-sim', aliases: ['live-simulator'], fn: liveSimulator },
  { name: 'secrets', aliases: ['11', 'secret-grant'], fn: secrets },
  { name: 'console', aliases: ['workspace-console'], fn: consoleBench },
  { name: 'broker', aliases: ['12', 'credentials'], fn: broker },
  { name: 'hogs', aliases: ['13', 'server-under-load'], fn: hogs },
  { name: 'gateway', aliases: ['14', 'llm-gateway'], fn: gateway },
  { name: 'dashboard', aliases: ['web', 'banner'], fn: dashboard },
  { name: 'nodes', aliases: ['15', 'replicas', 'relay'], fn: nodes },
  { name: 'doctor', aliases: ['16', 'probe'], fn: doctor },
  { name: 'kubernetes', aliases: ['17', 'k8s'], fn: kubernetes },
];

function newestMtime(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestMtime(p) : statSync(p).mtimeMs);
  }
  return newest;
}

async function main(argv: string[]): Promise<number> {
  const wanted = argv.filter((a) => a !== '--');
  if (wanted.some((a) => a === '-h' || a === '--help')) {
    process.stdout.write(
      `usage: npm run bench [-- NAME]\n  NAME: ${BENCHES.map((b) => `${b.name} (${b.aliases.join(', ')})`).join('; ')}\n`,
    );
    return 0;
  }
  const selected = wanted.length === 0 ? BENCHES : wanted.map((w) => BENCHES.find((b) => b.name === w || b.aliases.includes(w)));
  if (selected.some((b) => b === undefined)) {
    process.stderr.write(`unknown benchmark in ${wanted.join(' ')}: use one of ${BENCHES.map((b) => b.name).join(', ')}\n`);
    return 2;
  }
  if (!existsSync(join(REPO_ROOT, 'dist', 'cli', 'main.js'))) {
    process.stderr.write('dist/ is missing: run `npm run build` first (the server and the CLI run from dist/)\n');
    return 2;
  }
  if (newestMtime(join(REPO_ROOT, 'src')) > newestMtime(join(REPO_ROOT, 'dist'))) {
    process.stdout.write('warning: src/ changed after the last build: these figures are for dist/ as built (run `npm run build`)\n');
  }
  if (process.getuid?.() !== 0) {
    process.stdout.write(
      'warning: not root: the server has no per-workshop cgroups or freezer, so resume and memory cannot run as designed\n',
    );
  }
  process.stdout.write(`Atelier benchmarks, Node ${process.versions.node}, ${new Date().toISOString()}\n`);

  let scratch: Scratch | undefined;
  let server: BenchServer | undefined;
  const results: Record<string, unknown> = {};
  let failed = 0;
  let cleaning: Promise<string[]> | undefined;
  const cleanUp = (): Promise<string[]> =>
    (cleaning ??= (async () => {
      const problems: string[] = [];
      killLiveChildren();
      if (server) {
        problems.push(...(await server.shutdown()));
        problems.push(...(await server.sweep()));
        const notes = server.logNotes();
        if (notes.length > 0)
          process.stdout.write(
            `\nserver log, warnings and errors (${notes.length}):\n${notes
              .slice(0, 20)
              .map((l) => `  ${l}`)
              .join('\n')}\n`,
          );
      }
      if (scratch) problems.push(...(await removeScratch(scratch)));
      return problems;
    })());
  let signalled = false;
  const onSignal = (sig: NodeJS.Signals): void => {
    if (signalled) {
      process.stderr.write(`${sig}: still cleaning up (workshops outlive the server: wait for it)\n`);
      return;
    }
    signalled = true;
    process.stderr.write(`\n${sig}: deleting this run's workshops and stopping its server…\n`);
    if (server) server.aborted = true;
    void cleanUp().then((problems) => {
      for (const p of problems) process.stderr.write(`clean-up: ${p}\n`);
      process.exit(130);
    });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    scratch = makeScratch();
    server = await BenchServer.start(scratch);
    process.stdout.write(
      `server ready in ${(server.startMs / 1000).toFixed(2)} s (embedded PostgreSQL created from scratch), ${server.url}, data dir ${server.dataDir}\n`,
    );
    for (const b of selected as (typeof BENCHES)[number][]) {
      if (server.aborted) break;
      // Everything else on the machine competes for its cores: say how busy it was.
      process.stdout.write(
        `\n[load average ${loadavg()
          .map((x) => x.toFixed(2))
          .join(' ')} on ${cpus().length} cores]\n`,
      );
      try {
        results[b.name] = await b.fn(server);
      } catch (err) {
        failed++;
        const msg = err instanceof Error ? err.message : String(err);
        process.stdout.write(`  FAILED: ${msg}\n`);
        results[b.name] = { failed: msg };
      }
    }
  } catch (err) {
    failed++;
    process.stdout.write(`FAILED: ${err instanceof Error ? err.message : String(err)}\n`);
  } finally {
    const problems = await cleanUp();
    for (const p of problems) process.stdout.write(`clean-up: ${p}\n`);
    if (problems.length === 0) process.stdout.write('\nclean-up: all workshops deleted, server stopped, scratch directory removed\n');
  }
  const dir = join(REPO_ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify({ node: process.versions.node, date: new Date().toISOString(), results }, null, 2)}\n`);
  process.stdout.write(`results: ${file}\n`);
  return failed > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
