import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { AtelierError, type Workshop } from '../../../core/index.js';
import { relaySpliced } from '../../../relay/index.js';
import { call, type Target } from '../../client.js';
import type { CommandContext } from '../../context.js';
import { sayResumed } from '../../socket.js';
import { openTunnel, pipeStdio, tunnelFailure, type Tunnel } from './tunnel.js';

export interface ForwardFlags {
  resume: boolean;
  address?: string;
}

/** One `LOCAL:REMOTE` pair (or `PORT` for the same port on both sides; LOCAL 0 picks a free port). */
export interface ForwardSpec {
  local: number;
  remote: number;
}

/** Health of one forward, as `--list` shows it. */
type Health = 'ok' | 'remote-closed' | 'reconnecting' | 'suspended';

interface ForwardState extends ForwardSpec {
  health: Health;
  connections: number;
  lastError: string | null;
}

/** What a running `port-forward` publishes for `--list` (one file per process). */
export interface ForwardRecord {
  pid: number;
  workshop: string;
  context: string;
  address: string;
  since: string;
  updatedAt: string;
  forwards: ForwardState[];
}

const HEALTH_INTERVAL_MS = 2000;
/** The remote ports are probed (a connection opened and closed) every this many health checks. */
const PROBE_EVERY = 5;
const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 10_000];

function port(text: string, what: string, allowZero: boolean): number {
  const n = /^\d{1,5}$/.test(text) ? Number(text) : NaN;
  if (!(n >= (allowZero ? 0 : 1) && n <= 65535))
    throw new AtelierError(
      'INVALID_ARGUMENT',
      `${what} "${text}" is not a TCP port (1–65535${allowZero ? ', or 0 for any free port' : ''})`,
    );
  return n;
}

export function parseSpecs(specs: string[]): ForwardSpec[] {
  return specs.map((s) => {
    const parts = s.split(':');
    if (parts.length === 1) return { local: port(parts[0]!, 'port', false), remote: port(parts[0]!, 'port', false) };
    if (parts.length === 2) return { local: port(parts[0]!, 'local port', true), remote: port(parts[1]!, 'remote port', false) };
    throw new AtelierError('INVALID_ARGUMENT', `"${s}" is not LOCAL:REMOTE (for example 8080:3000) or PORT`);
  });
}

function forwardsDir(ctx: CommandContext): string {
  return join(ctx.config.configDir, 'forwards');
}

function listen(address: string, spec: ForwardSpec, onConnection: (s: Socket) => void): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer({ pauseOnConnect: true, allowHalfOpen: true }, onConnection);
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE')
        reject(
          new AtelierError(
            'CONFLICT',
            `local port ${spec.local} is already in use on ${address} (another program listens there): pick another, for example ${spec.local === 65535 ? 0 : spec.local + 10000 > 65535 ? 0 : spec.local + 10000}:${spec.remote}`,
          ),
        );
      else if (err.code === 'EACCES')
        reject(
          new AtelierError(
            'PERMISSION_DENIED',
            `local port ${spec.local} needs privileges: pick one above 1023, for example ${spec.local + 8000}:${spec.remote}`,
          ),
        );
      else reject(new AtelierError('INVALID_ARGUMENT', `cannot listen on ${address}:${spec.local}: ${err.message}`));
    });
    server.listen(spec.local, address, () => resolve(server));
  });
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * `atelier port-forward ID [LOCAL:REMOTE…]`: local listeners whose connections go through
 * tunnels to ports inside the workshop. Reports success only once every local listener accepts
 * and every remote port has answered; then keeps going across server restarts and network
 * blips (health checked every 2 s, reconnection with backoff, said on stderr), until Ctrl-C or
 * until the workshop is gone (exit 1, saying why).
 */
export async function portForward(ctx: CommandContext, id: string, specTexts: string[], flags: ForwardFlags): Promise<number> {
  const target = await ctx.target();
  const address = flags.address ?? '127.0.0.1';
  const say = (line: string): void => void process.stderr.write(`atelier: ${line}\n`);
  const workshop = await call<Workshop>(target, { method: 'GET', path: `/v1/workshops/${encodeURIComponent(id)}` });
  let specs = parseSpecs(specTexts);
  if (specs.length === 0) {
    if (workshop.forwardPorts.length === 0)
      throw new AtelierError(
        'INVALID_ARGUMENT',
        `give the ports to forward, for example \`atelier port-forward ${workshop.id} 8080:3000\` (the workshop's devcontainer.json lists no forwardPorts)`,
      );
    specs = workshop.forwardPorts.map((p) => ({ local: p, remote: p }));
    say(`forwarding the devcontainer's forwardPorts: ${workshop.forwardPorts.join(', ')}`);
  }
  const states: ForwardState[] = specs.map((s) => ({ ...s, health: 'ok', connections: 0, lastError: null }));
  const servers: Server[] = [];
  const record: ForwardRecord = {
    pid: process.pid,
    workshop: workshop.id,
    context: target.context,
    address,
    since: new Date().toISOString(),
    updatedAt: new Date().toISOString(),
    forwards: states,
  };
  const dir = forwardsDir(ctx);
  const file = join(dir, `${process.pid}.json`);
  const publish = (): void => {
    record.updatedAt = new Date().toISOString();
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      writeFileSync(`${file}.tmp`, JSON.stringify(record), { mode: 0o600 });
      renameSync(`${file}.tmp`, file);
    } catch {
      // --list is best effort; the forward itself goes on
    }
  };
  const closeAll = (): void => {
    for (const s of servers) s.close();
    rmSync(file, { force: true });
  };

  /** Relays a local connection through its tunnel. */
  const relay = (state: ForwardState, local: Socket, tunnel: Tunnel): void => {
    void relaySpliced(local, tunnel.socket, { tag: tunnel.id, fromB: tunnel.head }).done.then(async (end) => {
      state.connections--;
      // A reset from the tunnel's side (passed on to the local client as a reset): ask the server why.
      if (end.error === undefined || end.failed !== 'b') return;
      const why = await tunnelFailure(target, tunnel);
      state.lastError = why.message;
      say(`a connection to ${address}:${state.local} ended: ${why.message}`);
      publish();
    });
  };

  const connect = (state: ForwardState, local: Socket): void => {
    local.on('error', () => undefined);
    state.connections++;
    openTunnel(target, workshop.id, state.remote, flags.resume).then(
      (tunnel) => {
        sayResumed(workshop.id, tunnel.resumed);
        if (local.destroyed) {
          // The local client left meanwhile.
          state.connections--;
          tunnel.socket.destroy();
          return;
        }
        relay(state, local, tunnel);
      },
      (err: unknown) => {
        state.connections--;
        state.lastError = describe(err);
        if (err instanceof AtelierError && err.code === 'PORT_CLOSED') state.health = 'remote-closed';
        say(`a connection to ${address}:${state.local} was refused: ${describe(err)}`);
        local.destroy();
        publish();
      },
    );
  };

  // 1. Every local listener accepts (a port in use fails here, before anything is reported).
  try {
    for (const state of states) {
      const server = await listen(address, state, (s) => connect(state, s));
      servers.push(server);
      const a = server.address();
      if (a && typeof a === 'object') state.local = a.port;
    }
    // 2. Every remote port answers (the tunnel opens only once the server has connected to it).
    for (const state of states) {
      const probe = await openTunnel(target, workshop.id, state.remote, flags.resume);
      sayResumed(workshop.id, probe.resumed);
      probe.socket.destroy();
    }
  } catch (err) {
    closeAll();
    throw err;
  }
  for (const s of states) process.stdout.write(`Forwarding from ${address}:${s.local} -> ${workshop.id}:${s.remote}\n`);
  publish();

  return new Promise<number>((resolve) => {
    let attempt = 0;
    let tick = 0;
    let timer: NodeJS.Timeout;
    const stop = (code: number): void => {
      clearTimeout(timer);
      closeAll();
      resolve(code);
    };
    for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(sig, () => stop(0));
    const schedule = (ms: number): void => {
      timer = setTimeout(() => void check(), ms);
    };
    const check = async (): Promise<void> => {
      tick++;
      let w: Workshop;
      try {
        w = await call<Workshop>(target, { method: 'GET', path: `/v1/workshops/${encodeURIComponent(workshop.id)}` });
      } catch (err) {
        const code = err instanceof AtelierError ? err.code : 'UNAVAILABLE';
        if (code === 'WORKSHOP_NOT_FOUND') {
          say(`forward stopped: workshop ${workshop.id} was deleted`);
          return stop(1);
        }
        if (code === 'UNAUTHENTICATED' || code.startsWith('TOKEN_') || code === 'USER_DISABLED' || code === 'PERMISSION_DENIED') {
          say(`forward stopped: the server no longer accepts this context's credential: ${describe(err)}`);
          return stop(1);
        }
        const wait = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)]!;
        attempt++;
        for (const s of states) {
          s.health = 'reconnecting';
          s.lastError = describe(err);
        }
        publish();
        say(`server unreachable (${describe(err)}): reconnecting in ${(wait / 1000).toFixed(1)} s (attempt ${attempt})`);
        return schedule(wait);
      }
      const wasDown = attempt > 0;
      attempt = 0;
      if (w.status === 'Failed' || w.status === 'Deleting') {
        say(`forward stopped: workshop ${w.id} is ${w.status}${w.statusReason ? ` (${w.statusReason})` : ''}`);
        return stop(1);
      }
      if (wasDown) say('reconnected to the server');
      const probe = wasDown || tick % PROBE_EVERY === 0 || states.some((s) => s.health !== 'ok');
      for (const s of states) {
        if (w.status === 'Suspended' && !flags.resume) {
          s.health = 'suspended';
          continue;
        }
        if (!probe) continue;
        const before = s.health;
        try {
          (await openTunnel(target, w.id, s.remote, flags.resume)).socket.destroy();
          s.health = 'ok';
          if (before !== 'ok') say(`${s.local} -> ${w.id}:${s.remote} is healthy again`);
        } catch (err) {
          s.health = err instanceof AtelierError && err.code === 'PORT_CLOSED' ? 'remote-closed' : 'reconnecting';
          s.lastError = describe(err);
          if (before !== s.health) say(`${s.local} -> ${w.id}:${s.remote}: ${describe(err)}`);
        }
      }
      publish();
      schedule(HEALTH_INTERVAL_MS);
    };
    schedule(HEALTH_INTERVAL_MS);
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** `atelier port-forward --list`: the forwards running on this machine, with their health. */
export function listForwards(ctx: CommandContext): ForwardRecord[] {
  const dir = forwardsDir(ctx);
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((n) => /^\d+\.json$/.test(n));
  } catch {
    return [];
  }
  const out: ForwardRecord[] = [];
  for (const n of names) {
    const pid = Number(n.slice(0, -5));
    if (!alive(pid)) {
      rmSync(join(dir, n), { force: true });
      continue;
    }
    try {
      out.push(JSON.parse(readFileSync(join(dir, n), 'utf8')) as ForwardRecord);
    } catch {
      // being rewritten
    }
  }
  return out.sort((a, b) => a.since.localeCompare(b.since));
}

export function forwardsTable(items: ForwardRecord[]): string {
  if (items.length === 0) return 'no port-forward is running';
  const rows = [['PID', 'WORKSHOP', 'LOCAL', 'REMOTE', 'HEALTH', 'CONNS', 'CHECKED', 'LAST ERROR']];
  for (const r of items)
    for (const f of r.forwards)
      rows.push([
        String(r.pid),
        r.workshop,
        `${r.address}:${f.local}`,
        String(f.remote),
        f.health,
        String(f.connections),
        `${Math.max(0, Math.round((Date.now() - Date.parse(r.updatedAt)) / 1000))}s ago`,
        f.lastError ?? '',
      ]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `atelier port-forward --stdio ID PORT`: this process's stdin/stdout become the connection (ssh ProxyCommand). */
export async function portForwardStdio(ctx: CommandContext, id: string, portText: string, flags: ForwardFlags): Promise<number> {
  const remote = port(portText, 'port', false);
  const target: Target = await ctx.target();
  const tunnel = await openTunnel(target, id, remote, flags.resume);
  sayResumed(id, tunnel.resumed);
  await pipeStdio(target, tunnel, process.stdin, process.stdout);
  return 0;
}
