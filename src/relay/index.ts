// The relay runtime: moving bytes between two connected sockets, zero-copy where the kernel can
// (splice(2) in one python child per process, splice-relay.py says why), in Node otherwise.
// Used by the egress proxy, the workshops' internal names, the terminals' tunnels and the CLI's
// port-forward; it depends on nothing but Node (the wire contract of tunnels stays in core).

/** Relays two connected sockets until both ways end: first bytes in Node, then the splice relay. */
/** Relays two connected sockets through the splice relay at once (in Node when it cannot). */
export { relaySpliced } from './pairs.js';
/** Relays two connected sockets in Node (backpressure, half-close, a reset passed on). */
export { nodeRelay } from './pairs.js';
export type { RelayEnd, RelayedPair } from './pairs.js';
/** Resets a socket (TCP RST), so that its peer sees a reset rather than a clean end. */
export { resetSocket } from './splice.js';
/** The process's splice relay (started on first use). */
export { spliceRelay } from './splice.js';
export { SpliceRelay, type RelayOptions, type SpliceResult } from './splice.js';
