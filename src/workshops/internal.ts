import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { writeFileAtomic } from '../core/index.js';
import { relaySpliced, spliceRelay } from '../relay/index.js';
import { isSocket } from '../simulators/index.js';
import { INTERNAL_SUFFIX, type EgressProxy, type InternalTarget } from '../egress/index.js';
import { hostsFile, listenInSandboxMany, type SandboxHandle, type SandboxLayout } from '../sandbox/index.js';

/** One service of a workshop, reached inside it as `<label>.atelier.internal:<port>`. */
export interface InternalServiceSpec {
  label: string;
  port: number;
  target: InternalTarget;
}

interface Listening {
  key: string;
  server: net.Server;
  /** Unset while the service is only prepared (its simulator still starting): connections are refused. */
  target: InternalTarget | undefined;
}

interface WorkshopNet {
  id: string;
  /** label → its loopback address inside the workshop. */
  addresses: Map<string, string>;
  /** `label:port` → the listener inside the workshop. */
  listeners: Map<string, Listening>;
  /** `label:port` → a listener being opened (one helper for a batch), so that two callers never open the same one twice. */
  opening: Map<string, Promise<Listening | undefined>>;
  sockets: Set<net.Socket>;
}

/** Where the address of each label is remembered on the host (outside the workshop's reach). */
const ADDRESSES_FILE = 'internal-addresses.json';

/**
 * The workshop's own services under `.atelier.internal`, reachable two ways, both ending at the
 * server's target (a simulator's unix socket, the API's port):
 * - plain TCP: each label gets a loopback address of its own in the workshop's /etc/hosts
 *   (127.0.100.x, so two services may share a port), and the server listens there inside the
 *   workshop's network namespace (a socket handed over, like the egress listener), relaying each
 *   connection to the target;
 * - through the egress proxy (a client that ignores NO_PROXY): the proxy knows the same names.
 */
export class InternalNetwork {
  private readonly nets = new Map<string, WorkshopNet>();

  constructor(private readonly proxy: EgressProxy) {}

  private state(workshopId: string, layout: SandboxLayout): WorkshopNet {
    let n = this.nets.get(workshopId);
    if (!n) {
      const addresses = new Map<string, string>();
      const file = join(layout.root, ADDRESSES_FILE);
      if (existsSync(file)) {
        try {
          for (const [k, v] of Object.entries(JSON.parse(readFileSync(file, 'utf8')) as Record<string, string>)) addresses.set(k, v);
        } catch {
          // A damaged file: addresses are handed out afresh (hosts is rewritten below anyway).
        }
      }
      n = { id: workshopId, addresses, listeners: new Map(), opening: new Map(), sockets: new Set() };
      this.nets.set(workshopId, n);
    }
    return n;
  }

  private address(n: WorkshopNet, label: string): string {
    const known = n.addresses.get(label);
    if (known) return known;
    const used = new Set(n.addresses.values());
    for (let i = 1; i < 254 * 100; i++) {
      const a = `127.0.${100 + Math.floor((i - 1) / 254)}.${((i - 1) % 254) + 1}`;
      if (!used.has(a)) {
        n.addresses.set(label, a);
        return a;
      }
    }
    throw new Error('no loopback address left for an internal service');
  }

  /**
   * Makes `services` the workshop's whole set: opens what is new, closes what is gone, rewrites
   * /etc/hosts (atomically) and the proxy's names. Connections already open are not disturbed.
   */
  async apply(
    workshopId: string,
    handle: SandboxHandle,
    layout: SandboxLayout,
    hostname: string,
    services: InternalServiceSpec[],
  ): Promise<void> {
    const n = this.state(workshopId, layout);
    const wanted = new Map<string, InternalServiceSpec>();
    for (const s of services) wanted.set(`${s.label}:${s.port}`, s);
    await this.open(n, handle, [...wanted.values()]);
    for (const [key, l] of n.listeners) {
      if (!wanted.has(key)) {
        l.server.close();
        n.listeners.delete(key);
      }
    }
    // A target may change (a simulator restarted elsewhere): listeners follow the latest.
    for (const [key, s] of wanted) n.listeners.get(key)!.target = s.target;
    writeFileAtomic(join(layout.root, ADDRESSES_FILE), JSON.stringify(Object.fromEntries(n.addresses)), 0o600);
    const labels = [...new Set(services.map((s) => s.label))].sort();
    // Readable by the workshop, which sees it at /run/atelier/hosts.
    writeFileAtomic(
      join(layout.run, 'hosts'),
      hostsFile(
        hostname,
        labels.map((label) => ({ address: n.addresses.get(label)!, name: `${label}${INTERNAL_SUFFIX}` })),
      ),
      0o644,
    );
    this.proxy.setInternalServices(
      workshopId,
      services.map((s) => ({ host: `${s.label}${INTERNAL_SUFFIX}`, port: s.port, target: s.target })),
    );
  }

  /**
   * Opens, inside the workshop, the listeners of services about to exist (a simulator that is
   * starting: its name and port are known before its process is), so that publishing it later
   * costs no helper spawn. Nothing resolves to them until `apply` writes the hosts entry, and
   * a connection that arrives before is refused. `apply` closes those that were not needed.
   */
  async prepare(
    workshopId: string,
    handle: SandboxHandle,
    layout: SandboxLayout,
    services: Array<{ label: string; port: number }>,
  ): Promise<void> {
    await this.open(this.state(workshopId, layout), handle, services);
  }

  /** The listeners of `services` that are neither open nor being opened, opened by one helper. */
  private async open(n: WorkshopNet, handle: SandboxHandle, services: ReadonlyArray<{ label: string; port: number }>): Promise<void> {
    const waits: Array<Promise<Listening | undefined>> = [];
    const missing: Array<{ key: string; address: string; port: number }> = [];
    for (const s of services) {
      const key = `${s.label}:${s.port}`;
      if (n.listeners.has(key)) continue;
      const pending = n.opening.get(key);
      if (pending) waits.push(pending);
      else if (!missing.some((m) => m.key === key)) missing.push({ key, address: this.address(n, s.label), port: s.port });
    }
    if (missing.length > 0) {
      const batch = listenInSandboxMany(handle, missing).then((servers) =>
        servers.map((server, i) => {
          const l: Listening = { key: missing[i]!.key, server, target: undefined };
          server.on('connection', (sock) => this.relay(n, l, sock));
          server.on('error', () => undefined);
          // The workshop was closed while its listeners were opening: they go with it.
          if (this.nets.get(n.id) !== n) server.close();
          else n.listeners.set(l.key, l);
          return l;
        }),
      );
      missing.forEach((m, i) => {
        const one = batch.then((ls) => ls[i]);
        n.opening.set(m.key, one);
        void one.catch(() => undefined).finally(() => n.opening.delete(m.key));
      });
      waits.push(batch.then(() => undefined));
    }
    await Promise.all(waits);
  }

  private relay(n: WorkshopNet, l: Listening, a: net.Socket): void {
    const t = l.target;
    // A simulator's socket is dialled only if it is a socket itself: never through a link the
    // simulator put in its place (the server is root in the host mount namespace; see
    // simulators/socketGuard.ts, which also says why root mode is safe from a swap after this check).
    if (!t || ('path' in t && !isSocket(t.path))) {
      a.destroy();
      return;
    }
    const b =
      'path' in t ? net.connect({ path: t.path, allowHalfOpen: true }) : net.connect({ host: t.host, port: t.port, allowHalfOpen: true });
    a.allowHalfOpen = true;
    n.sockets.add(a);
    n.sockets.add(b);
    a.once('close', () => n.sockets.delete(a));
    b.once('close', () => n.sockets.delete(b));
    // Until the target answers, a failure on either side ends both; then relaySpliced takes the
    // pair (zero copy when it can), cut with the workshop's other connections by close().
    const fail = (): void => {
      a.destroy();
      b.destroy();
    };
    a.once('error', fail);
    b.once('error', fail);
    b.once('connect', () => {
      a.off('error', fail);
      b.off('error', fail);
      if (a.destroyed) b.destroy();
      else relaySpliced(a, b, { tag: `internal:${n.id}` });
    });
  }

  /** Closes the workshop's listeners and connections (delete, failure, server stop). */
  close(workshopId: string): void {
    const n = this.nets.get(workshopId);
    if (!n) return;
    this.nets.delete(workshopId);
    for (const l of n.listeners.values()) l.server.close();
    for (const s of n.sockets) s.destroy();
    spliceRelay().closeTag(`internal:${workshopId}`);
  }

  closeAll(): void {
    for (const id of [...this.nets.keys()]) this.close(id);
  }
}
