import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { TUNNEL_CUT_MESSAGE, TUNNEL_RESET_INSIDE_MESSAGE, type ErrorCode, type TunnelOutcome } from '../core/index.js';
import { relaySpliced, resetSocket, type RelayEnd } from '../relay/index.js';

/** How long (and how many) ended tunnels are remembered for a client asking why. */
const REMEMBER_MS = 10 * 60_000;
const REMEMBER_MAX = 10_000;
/** A client asking about a tunnel still being torn down waits this long for its end. */
const WHY_WAIT_MS = 2000;

type Ending = Pick<TunnelOutcome, 'state' | 'code' | 'message'>;

interface Live {
  workshop: string;
  /** Set once the server decided to end the tunnel itself (workshop deleted, shutdown…). */
  cutBy?: Ending;
  cut(): void;
  ended: Promise<void>;
}

interface Ended extends Ending {
  workshop: string;
  at: number;
}

/**
 * The byte tunnels a server relays, each named by a random id the client gets in its 101: the
 * pairs (client socket, connection inside the workshop) handed to a relay, the in-process ones
 * (the SSH endpoint), and, for a while after they ended, how they ended, so that a client that
 * saw its tunnel reset can ask why (`GET /v1/workshops/:id/tunnels/:tunnel`).
 */
export class TunnelRelays {
  private readonly live = new Map<string, Live>();
  private readonly ended = new Map<string, Ended>();

  newId(): string {
    return `tun-${randomBytes(16).toString('base64url')}`;
  }

  /**
   * Relays the client's upgraded socket and the connection inside the workshop until both ways
   * are done (`fromClient`: bytes the client sent right behind its request).
   */
  relay(id: string, workshop: string, client: Socket, inside: Socket, fromClient: Buffer): void {
    const r = relaySpliced(client, inside, { tag: id, fromA: fromClient });
    this.track(id, workshop, r.done, () => r.cut());
  }

  /**
   * Registers a tunnel the server answers itself (the SSH endpoint on the client's socket): cut
   * resets the socket; it ends when the socket closes.
   */
  serve(id: string, workshop: string, client: Socket): void {
    const done = new Promise<RelayEnd>((resolve) =>
      client.once('close', (hadError) =>
        resolve({ aToB: client.bytesRead, bToA: client.bytesWritten, error: hadError ? 'ECONNRESET' : undefined, failed: 'a' }),
      ),
    );
    this.track(id, workshop, done, () => resetSocket(client));
  }

  /** Tunnels relayed now (all, or of one workshop). */
  count(workshop?: string): number {
    let n = 0;
    for (const t of this.live.values()) if (workshop === undefined || t.workshop === workshop) n++;
    return n;
  }

  /** Ends a served tunnel with a reason the client can ask for. */
  fail(id: string, code: ErrorCode, message: string): void {
    const t = this.live.get(id);
    if (!t) return;
    t.cutBy = { state: 'cut', code, message };
    t.cut();
  }

  private track(id: string, workshop: string, done: Promise<RelayEnd>, cut: () => void): void {
    const t: Live = {
      workshop,
      cut,
      ended: done.then((end) => {
        this.live.delete(id);
        this.remember(id, { workshop, at: Date.now(), ...(t.cutBy ?? this.ending(end)) });
      }),
    };
    this.live.set(id, t);
  }

  private ending(end: RelayEnd): Ending {
    if (end.error === undefined) return { state: 'closed', message: 'the tunnel ended normally (both sides closed)' };
    if (end.error === 'EHELPER') return { state: 'cut', code: 'UNAVAILABLE', message: `${TUNNEL_CUT_MESSAGE}: the server's relay stopped` };
    if (end.failed === 'b') return { state: 'reset', code: 'UNAVAILABLE', message: TUNNEL_RESET_INSIDE_MESSAGE };
    return { state: 'reset', code: 'UNAVAILABLE', message: `the client's side of the tunnel failed (${end.error})` };
  }

  private remember(id: string, e: Ended): void {
    this.ended.set(id, e);
    const old = Date.now() - REMEMBER_MS;
    for (const [k, v] of this.ended) {
      if (this.ended.size <= REMEMBER_MAX && v.at >= old) break;
      this.ended.delete(k);
    }
  }

  /** How tunnel `id` of `workshop` went (waiting a little for one being torn down). */
  async why(workshop: string, id: string): Promise<TunnelOutcome> {
    const t = this.live.get(id);
    if (t && t.workshop === workshop) await Promise.race([t.ended, new Promise<void>((r) => setTimeout(r, WHY_WAIT_MS).unref())]);
    const live = this.live.get(id);
    if (live && live.workshop === workshop) return { id, workshop, state: 'open', message: 'the tunnel is open' };
    const e = this.ended.get(id);
    if (e && e.workshop === workshop) return { id, workshop, state: e.state, code: e.code, message: e.message };
    return { id, workshop, state: 'unknown', message: `${TUNNEL_CUT_MESSAGE}: this server has no record of tunnel ${id}` };
  }

  /** Cuts every tunnel of a workshop (deleted), saying why to clients that ask. */
  cutWorkshop(workshop: string, code: ErrorCode, message: string): number {
    let n = 0;
    for (const t of this.live.values())
      if (t.workshop === workshop) {
        t.cutBy = { state: 'cut', code, message };
        t.cut();
        n++;
      }
    return n;
  }

  /** Cuts every tunnel (the server is shutting down). */
  closeAll(): void {
    for (const t of this.live.values()) {
      t.cutBy = { state: 'cut', code: 'UNAVAILABLE', message: TUNNEL_CUT_MESSAGE };
      t.cut();
    }
  }
}
