import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { AtelierError, type ExecResult, type Workshop } from '../../../core/index.js';
import { raiseFor, readBody, request } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { openTunnel } from '../port-forward/tunnel.js';

/** One step of the synthetic run: what it did and how long it took. */
export interface ProbeStep {
  name: 'create' | 'exec' | 'port-forward' | 'suspend' | 'resume' | 'delete';
  status: 'ok' | 'fail' | 'skip';
  ms: number;
  detail: string;
}

export interface ProbeReport {
  server: string;
  workshop: string | undefined;
  steps: ProbeStep[];
}

export const PROBE_PORT = 18_127;
export const GREETING = 'atelier-doctor-probe';
// One connection on 127.0.0.1:PROBE_PORT inside the workshop, answered with GREETING.
export const LISTENER = `
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', ${PROBE_PORT}))
s.listen(1)
s.settimeout(30)
c, _ = s.accept()
c.sendall(b'${GREETING}\\n')
c.close()
`;

function git(cwd: string, args: string[]): Promise<void> {
  return new Promise((done, fail) =>
    execFile('git', args, { cwd, timeout: 30_000 }, (err, _out, stderr) =>
      err ? fail(new Error(`git ${args[0]}: ${stderr || err.message}`)) : done(),
    ),
  );
}

/** A repository of one commit for the probe's workshop, in a directory of its own under `parent`. */
async function probeRepo(parent: string): Promise<string> {
  const dir = mkdtempSync(join(parent, '.atelier-doctor-'));
  writeFileSync(join(dir, 'README.md'), '# atelier server doctor --probe\n');
  await git(dir, ['init', '-q']);
  await git(dir, ['add', 'README.md']);
  await git(dir, ['-c', 'user.name=atelier doctor', '-c', 'user.email=doctor@atelier.invalid', 'commit', '-qm', 'probe']);
  return dir;
}

async function execJson(ctx: CommandContext, id: string, command: string[]): Promise<ExecResult> {
  const target = await ctx.target();
  const body = { command, timeoutSeconds: 60 };
  const { path } = (await ctx.api()).request('exec', { params: { id }, body });
  const res = await request(target, { method: 'POST', path, body, accept: 'application/json' });
  await raiseFor(res, target);
  return JSON.parse((await readBody(res)).toString('utf8')) as ExecResult;
}

/** Connects to PROBE_PORT in the workshop through a tunnel (as `port-forward` does) and reads the greeting. */
async function forward(ctx: CommandContext, id: string): Promise<string> {
  const target = await ctx.target();
  const deadline = Date.now() + 20_000;
  for (;;) {
    let tunnel;
    try {
      tunnel = await openTunnel(target, id, PROBE_PORT, false);
    } catch (err) {
      // The listener is still starting: try again shortly.
      if (err instanceof AtelierError && err.code === 'PORT_CLOSED' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      throw err;
    }
    const chunks: Buffer[] = [tunnel.head];
    const text = await new Promise<string>((done, fail) => {
      const timer = setTimeout(() => fail(new Error('no answer through the tunnel within 10 s')), 10_000);
      tunnel.socket.on('data', (c: Buffer) => chunks.push(c));
      tunnel.socket.once('error', fail);
      tunnel.socket.once('end', () => {
        clearTimeout(timer);
        done(Buffer.concat(chunks).toString('utf8'));
      });
      tunnel.socket.resume();
    }).finally(() => tunnel.socket.destroy());
    if (!text.includes(GREETING)) throw new Error(`the tunnel carried ${JSON.stringify(text.slice(0, 80))}, not the listener's greeting`);
    return `a TCP connection to port ${PROBE_PORT} in the workshop answered through the tunnel`;
  }
}

/**
 * `atelier server doctor --probe`: create → exec → port-forward → suspend → resume → delete through
 * the server of the current context, each step timed; the workshop is deleted whatever happens.
 */
export async function runProbe(ctx: CommandContext, repoFlag: string | undefined): Promise<ProbeReport> {
  const target = await ctx.target();
  const api = await ctx.api();
  const steps: ProbeStep[] = [];
  const report: ProbeReport = { server: target.url, workshop: undefined, steps };
  let failed = false;
  const step = async (name: ProbeStep['name'], f: () => Promise<string>): Promise<void> => {
    if (failed && name !== 'delete') {
      steps.push({ name, status: 'skip', ms: 0, detail: 'not run: an earlier step failed' });
      return;
    }
    const t0 = performance.now();
    try {
      const detail = await f();
      steps.push({ name, status: 'ok', ms: Math.round(performance.now() - t0), detail });
    } catch (err) {
      failed = true;
      steps.push({ name, status: 'fail', ms: Math.round(performance.now() - t0), detail: (err as Error).message });
    }
  };
  // The server clones from local paths under its allowed roots: the home directory is one by default.
  const repo = repoFlag === undefined ? await probeRepo(homedir()) : resolve(repoFlag);
  let workshop: Workshop | undefined;
  try {
    await step('create', async () => {
      workshop = await api.call('createWorkshop', { body: { repo, name: `doctor-${process.pid}`, memory: '256m' } });
      report.workshop = workshop.id;
      if (workshop.status !== 'Running') throw new Error(`workshop ${workshop.id} is ${workshop.status}: ${workshop.statusReason ?? ''}`);
      return `workshop ${workshop.id} running`;
    });
    const id = (): string => workshop!.id;
    await step('exec', async () => {
      const r = await execJson(ctx, id(), ['true']);
      if (r.exitCode !== 0) throw new Error(`\`true\` exited ${r.exitCode}: ${r.stderr.slice(0, 200)}`);
      return '`true` exited 0';
    });
    await step('port-forward', async () => {
      const listener = execJson(ctx, id(), ['python3', '-c', LISTENER]);
      // Reported by the tunnel step if it fails; awaited so that no request outlives the probe.
      listener.catch(() => undefined);
      const detail = await forward(ctx, id());
      const r = await listener;
      if (r.exitCode !== 0) throw new Error(`the listener in the workshop exited ${r.exitCode}: ${r.stderr.slice(0, 200)}`);
      return detail;
    });
    await step('suspend', async () => {
      const w = await api.call('stopWorkshop', { params: { id: id() } });
      if (w.status !== 'Suspended') throw new Error(`the workshop is ${w.status} after the suspend`);
      return 'suspended';
    });
    await step('resume', async () => {
      const w = await api.call('resumeWorkshop', { params: { id: id() } });
      if (w.status !== 'Running') throw new Error(`the workshop is ${w.status} after the resume`);
      const r = await execJson(ctx, id(), ['true']);
      if (r.exitCode !== 0) throw new Error(`\`true\` exited ${r.exitCode} after the resume`);
      return 'running again (`true` exited 0)';
    });
  } finally {
    if (workshop) {
      const ws = workshop;
      await step('delete', async () => {
        await api.call('deleteWorkshop', { params: { id: ws.id } });
        return 'deleted';
      });
    }
    if (repoFlag === undefined) rmSync(repo, { recursive: true, force: true });
  }
  return report;
}
