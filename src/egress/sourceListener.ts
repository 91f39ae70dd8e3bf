import net from 'node:net';
import type { EgressProxy } from './proxy.js';
import type { EgressPolicy } from './policy.js';

/**
 * One TCP listener for the egress proxy shared by many workshops, each connection given to the
 * workshop its source address belongs to (in a cluster: the pod IP, docs/kubernetes.md "The
 * egress proxy in the cluster"). On a single node each workshop has a listener of its own inside
 * its network namespace, so the listener is the identity; here the address is, and `identify`
 * (the pod-IP mapping, kept from the API server) says whose it is. A connection from an address
 * that is nobody's, or a workshop this listener does not serve, is closed before a byte is read:
 * nothing the client sends decides who it is.
 *
 * Each served workshop is an ordinary listener of the proxy (`EgressProxy.listen`) on a server
 * that never listens itself: a connection is handed to it as a listening server would, so the
 * proxy's per-workshop policy, limits, journal and close() apply unchanged.
 */
export class SourceAddressListener {
  readonly server: net.Server;
  private readonly served = new Map<string, net.Server>();

  constructor(
    private readonly proxy: EgressProxy,
    private readonly identify: (address: string) => string | undefined,
    private readonly onRefused: (address: string) => void = () => {},
  ) {
    this.server = net.createServer({ allowHalfOpen: true }, (s) => this.dispatch(s));
  }

  /** Listens on `port` of `host` (the pod's address, 0.0.0.0 in a cluster); returns the port. */
  async listen(port: number, host: string): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    return (this.server.address() as net.AddressInfo).port;
  }

  /** Serves workshop `id` through this listener (its connections are then judged by `policy`). */
  async serve(id: string, policy?: EgressPolicy): Promise<void> {
    const handoff = new net.Server();
    await this.proxy.listen(id, handoff, policy);
    this.served.set(id, handoff);
  }

  /** Stops serving workshop `id`: its connections are closed, new ones refused. */
  async unserve(id: string): Promise<void> {
    this.served.delete(id);
    await this.proxy.close(id);
  }

  /** Closes the shared listener and every served workshop. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    await Promise.all([...this.served.keys()].map((id) => this.unserve(id)));
    await closed;
  }

  private dispatch(s: net.Socket): void {
    const address = s.remoteAddress ?? '';
    const id = address ? this.identify(address) : undefined;
    const handoff = id !== undefined ? this.served.get(id) : undefined;
    if (!handoff) {
      this.onRefused(address);
      s.destroy();
      return;
    }
    handoff.emit('connection', s);
  }
}
