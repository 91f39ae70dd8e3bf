import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { writeFileAtomic } from '../core/index.js';
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
  target: InternalTarget;
}

interface WorkshopNet {
  /** label → its loopback address inside the workshop. */
  addresses: Map<string, string>;
  /** `label:port` → the listener inside the workshop. */
  listeners: Map<string, Listening>;
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
      n = { addresses, listeners: new Map(), sockets: new Set() };
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
    const wanted = new Map<string, InternalServiceSpec & { address: string }>();
    for (const s of services) wanted.set(`${s.label}:${s.port}`, { ...s, address: this.address(n, s.label) });
    for (const [key, l] of n.listeners) {
      if (!wanted.has(key)) {
        l.server.close();
        n.listeners.delete(key);
      }
    }
    const missing = [...wanted.entries()].filter(([key]) => !n.listeners.has(key));
    const servers = await listenInSandboxMany(
      handle,
      missing.map(([, s]) => ({ address: s.address, port: s.port })),
    );
    missing.forEach(([key, s], i) => {
      const server = servers[i]!;
      const l: Listening = { key, server, target: s.target };
      server.on('connection', (sock) => this.relay(n, l, sock));
      server.on('error', () => undefined);
      n.listeners.set(key, l);
    });
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

  private relay(n: WorkshopNet, l: Listening, a: net.Socket): void {
    const t = l.target;
    const b =
      'path' in t ? net.connect({ path: t.path, allowHalfOpen: true }) : net.connect({ host: t.host, port: t.port, allowHalfOpen: true });
    a.allowHalfOpen = true;
    n.sockets.add(a);
    n.sockets.add(b);
    const kill = (): void => {
      a.destroy();
      b.destroy();
    };
    a.once('close', () => n.sockets.delete(a));
    b.once('close', () => n.sockets.delete(b));
    a.on('error', kill);
    b.on('error', kill);
    a.once('close', (hadError) => {
      if (hadError || !a.readableEnded) b.destroy();
    });
    b.once('close', (hadError) => {
      if (hadError || !b.readableEnded) a.destroy();
    });
    // pipe() keeps both directions under backpressure and passes a FIN on (half-close).
    a.pipe(b);
    b.pipe(a);
  }

  /** Closes the workshop's listeners and connections (delete, failure, server stop). */
  close(workshopId: string): void {
    const n = this.nets.get(workshopId);
    if (!n) return;
    this.nets.delete(workshopId);
    for (const l of n.listeners.values()) l.server.close();
    for (const s of n.sockets) s.destroy();
  }

  closeAll(): void {
    for (const id of [...this.nets.keys()]) this.close(id);
  }
}
