import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { AtelierError, type PtyStart, type TunnelOutcome } from '../core/index.js';
import type { ApprovalEvent, ApprovalService } from '../approvals/index.js';
import type { Pool } from '../db/index.js';
import type { Principal } from '../identity/index.js';
import { SandboxConnectError } from '../sandbox/index.js';
import type { WorkshopService } from '../workshops/index.js';
import { PtySession, type TerminalTarget } from './pty.js';
import { TunnelRelays } from './relays.js';
import { AgentSessions, type SessionInfo } from './sessions.js';
import { SshEndpoint, type Sealer, type SshKeyInfo } from './ssh.js';
import type { HeldSession } from './held.js';

/** The port whose tunnel is answered by the workshop's SSH endpoint. */
export const SSH_PORT = 22;

export interface TerminalsOptions {
  workshops: WorkshopService;
  /** The SSH endpoint's keys (users' public keys, workshops' host keys). */
  pool: Pool;
  /** The master key: seals the SSH host keys at rest. */
  sealer: Sealer;
  log: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void };
  /** Announced to attached terminals: what their workshop asks a human for. */
  approvals?: ApprovalService | undefined;
  /** Where agent sessions' holders listen (DATA_DIR/sessions): they outlive the server. */
  sessionsDir: string;
}

/** A running workshop a terminal or tunnel goes into, and whether it was resumed for it. */
export type OpenTarget = TerminalTarget & { resumed: boolean };

/** An agent session's start request (see the route's StartSessionRequest). */
export interface SessionStart {
  name?: string | undefined;
  command?: string[] | undefined;
  cols?: number | undefined;
  rows?: number | undefined;
  resume?: boolean | undefined;
}

/** What an approval announcement says to an attached terminal (never a secret's value). */
export interface ApprovalNotice {
  id: string;
  category: string;
  payload: Record<string, unknown>;
}

/**
 * The terminals room, as the server's routes see it: PTYs, byte tunnels (port-forward, the SSH
 * endpoint on port 22), SSH keys and agent sessions. Every call is authorised here through the
 * workshop service; the routes only map HTTP and WebSocket onto these calls.
 */
export interface Terminals {
  /** Checks that `actor` may open terminals and tunnels into the workshop (`operate`). */
  authorize(workshopId: string, actor: Principal): Promise<void>;
  /** The running sandbox to open a terminal or tunnel into (resumed first when asked and suspended). */
  target(workshopId: string, actor: Principal, opts: { resume: boolean }): Promise<OpenTarget>;
  /** Connects to `port` inside the workshop (PORT_CLOSED when nothing listens there). */
  dial(target: TerminalTarget, port: number): Promise<Socket>;
  /** Starts a PTY running `command` in the workshop (closed with the server). */
  startPty(target: TerminalTarget, command: string[], start: PtyStart): PtySession;
  /** Calls `fn` for each approval the workshop files from now on; the returned function stops it. */
  onApproval(workshopId: string, fn: (notice: ApprovalNotice) => void): () => void;
  /** A new tunnel id (what the client asks about: `GET …/tunnels/:tunnel`). */
  newTunnelId(): string;
  /** Relays the client's upgraded socket to a connection inside the workshop until both ways end. */
  relay(tunnelId: string, workshopId: string, client: Socket, inside: Socket, fromClient: Buffer): void;
  /** Serves the workshop's SSH endpoint on the client's raw socket, for the user the tunnel authenticated. */
  serveSsh(tunnelId: string, client: Socket, head: Buffer, target: TerminalTarget, userId: string): void;
  /** Serves the workshop's SSH endpoint on a stream (a WebSocket's); rejects when it cannot start. */
  serveSshStream(stream: Duplex, target: TerminalTarget, userId: string): Promise<void>;
  /** How a tunnel ended (or that it is still open), for whoever may open the workshop's tunnels. */
  tunnelOutcome(workshopId: string, tunnelId: string, actor: Principal): Promise<TunnelOutcome>;
  /** The workshop's SSH host alias, host key and port (the `read` right). */
  sshInfo(workshopId: string, actor: Principal): Promise<{ workshop: string; hostAlias: string; hostKey: string; port: number }>;
  /** Registers one OpenSSH public key line for `userId` (undefined: not a public key). */
  addSshKey(userId: string, publicKey: string): Promise<SshKeyInfo | undefined>;
  sshKeys(userId: string): Promise<SshKeyInfo[]>;
  /** Removes a key by fingerprint; false when `userId` has no such key. */
  removeSshKey(userId: string, fingerprint: string): Promise<boolean>;
  /** Starts (or, with `resume`, finds) an agent session. */
  startSession(workshopId: string, actor: Principal, req: SessionStart): Promise<{ created: boolean; session: SessionInfo }>;
  listSessions(workshopId: string, actor: Principal): Promise<SessionInfo[]>;
  stopSession(workshopId: string, name: string, actor: Principal): Promise<{ name: string; stopped: boolean }>;
  /** The session to attach to, authorised (`operate`), its workshop resumed when asked. */
  findSession(workshopId: string, name: string, actor: Principal, opts: { resume: boolean }): Promise<OpenTarget>;
  /** A live session of this server (undefined once it ended). */
  session(workshopId: string, name: string): HeldSession | undefined;
  /** Tunnels relayed now (the `atelier_tunnels` gauge). */
  counts(): { relayed: number };
  /**
   * Resets every live tunnel (clients are told the tunnel was cut): the server is stopping, and
   * the HTTP server waits for upgraded connections it no longer owns.
   */
  cutTunnels(): void;
  /** Stops everything (tunnels, PTYs, connectors); agent sessions go on, held, for the next server. */
  close(): void;
}

/**
 * Builds the terminals room: one SSH endpoint, the live tunnels (ports dialled by the driver) and
 * PTYs, the agent sessions (adopted from a previous server). A workshop being deleted has its
 * tunnels cut, its SSH endpoint and sessions forgotten (its `deleting` event) before its
 * sandbox goes.
 */
export function createTerminals(opts: TerminalsOptions): Terminals {
  const { workshops, log, approvals } = opts;
  const ssh = new SshEndpoint(opts.pool, opts.sealer, workshops.driver, log);
  // Host keys left in clear by an older server are sealed at start (and on first use, if this fails).
  void ssh.sealStoredKeys().then(
    (n) => {
      if (n > 0) log.info({ sealed: n }, 'sealed the SSH host keys stored in clear');
    },
    (err: unknown) => log.warn({ err: String(err) }, 'could not seal the SSH host keys stored in clear yet'),
  );
  const sessions = new AgentSessions(workshops, log, opts.sessionsDir);
  const ptys = new Set<PtySession>();
  const relays = new TunnelRelays();

  const unsubscribe = workshops.events.on('deleting', ({ id }) => {
    relays.cutWorkshop(id, 'WORKSHOP_NOT_FOUND', `workshop ${id} was deleted`);
    ssh.forget(id);
    sessions.forget(id);
  });

  return {
    authorize: (workshopId, actor) => workshops.authorize(workshopId, actor, 'operate'),

    async target(workshopId, actor, { resume }) {
      const t = await workshops.sandboxFor(workshopId, actor, { resume });
      return { id: t.id, sandbox: t.sandbox, env: t.env, driver: workshops.driver, resumed: t.resumed };
    },

    async dial(target, port) {
      try {
        return await workshops.driver.connect(target.sandbox, port);
      } catch (err) {
        if (err instanceof SandboxConnectError)
          throw new AtelierError('PORT_CLOSED', `${err.message} (${target.id}): start the server there first`, {
            port,
            errno: err.errno,
          });
        throw new AtelierError('UNAVAILABLE', `could not reach port ${port} in workshop ${target.id}: ${(err as Error).message}`);
      }
    },

    startPty(target, command, start) {
      const session = new PtySession(target, command, start);
      ptys.add(session);
      session.onExit(() => ptys.delete(session));
      return session;
    },

    onApproval(workshopId, fn) {
      if (!approvals) return () => undefined;
      const onEvent = ({ event }: { event: ApprovalEvent }): void => {
        const a = event.approval;
        if (event.type !== 'created' || a.workshopId !== workshopId) return;
        fn({ id: a.id, category: a.category, payload: a.payload });
      };
      approvals.events.on('event', onEvent);
      return () => approvals.events.off('event', onEvent);
    },

    newTunnelId: () => relays.newId(),

    relay: (tunnelId, workshopId, client, inside, fromClient) => relays.relay(tunnelId, workshopId, client, inside, fromClient),

    serveSsh(tunnelId, client, head, target, userId) {
      relays.serve(tunnelId, target.id, client);
      if (head.length > 0) client.unshift(head);
      ssh
        .serve(client, target, userId)
        .catch((err: Error) => relays.fail(tunnelId, 'UNAVAILABLE', `the SSH endpoint could not start: ${err.message}`));
    },

    serveSshStream: (stream, target, userId) => ssh.serve(stream, target, userId),

    async tunnelOutcome(workshopId, tunnelId, actor) {
      // Whoever may open the workshop's tunnels (the `operate` right) may ask how one ended.
      await workshops.authorize(workshopId, actor, 'operate');
      const w = await workshops.get(workshopId, actor);
      const outcome = await relays.why(w.id, tunnelId);
      if (w.status === 'Deleting' && outcome.state !== 'closed')
        return { ...outcome, state: 'cut', code: 'WORKSHOP_NOT_FOUND', message: `workshop ${w.id} was deleted` };
      return outcome;
    },

    async sshInfo(workshopId, actor) {
      const w = await workshops.get(workshopId, actor);
      const { publicKey } = await ssh.hostKey(w.id);
      return { workshop: w.id, hostAlias: `atelier-${w.id}`, hostKey: publicKey, port: SSH_PORT };
    },

    addSshKey: (userId, publicKey) => ssh.addKey(userId, publicKey),
    sshKeys: (userId) => ssh.keys(userId),
    removeSshKey: (userId, fingerprint) => ssh.removeKey(userId, fingerprint),

    startSession: (workshopId, actor, req) => sessions.start(workshopId, actor, req),
    listSessions: (workshopId, actor) => sessions.list(workshopId, actor),
    stopSession: (workshopId, name, actor) => sessions.stop(workshopId, name, actor),
    async findSession(workshopId, name, actor, { resume }) {
      const found = await sessions.find(workshopId, name, actor, { resume });
      return { ...found.target, resumed: found.resumed };
    },
    session: (workshopId, name) => sessions.get(workshopId, name),

    counts: () => ({ relayed: relays.count() }),

    cutTunnels: () => relays.closeAll(),

    close() {
      unsubscribe();
      relays.closeAll();
      workshops.driver.closeConnections();
      for (const p of ptys) p.close();
      sessions.close();
    },
  };
}
