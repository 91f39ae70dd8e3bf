import { spawn } from 'node:child_process';
import { createHash, timingSafeEqual } from 'node:crypto';
import { constants as osConstants } from 'node:os';
import type { Duplex } from 'node:stream';
import ssh2 from 'ssh2';
import type { AuthContext, Connection, ParsedKey, PseudoTtyInfo, ServerChannel, Session } from 'ssh2';
import { queryRows, type Pool } from '../db/index.js';
import type { WorkshopDriver } from '../workshops/index.js';
import { PtySession, type TerminalTarget } from './pty.js';

const { Server, utils } = ssh2;

/** OpenSSH's SFTP server, run inside the workshop as its user (apt `openssh-sftp-server`). */
const SFTP_SERVER = '/usr/lib/openssh/sftp-server';
const MAX_ENV = 64;
/** The user's shell inside the workshop. */
const SHELL = '/bin/bash';

/** Seals what the database must not hold in clear (the server's MasterKey). */
export interface Sealer {
  encrypt(plain: string, context: string): string;
  decrypt(sealed: string, context: string): Buffer;
}

/** The additional data a host key is sealed with: a sealed key cannot be passed off as another workshop's. */
function hostKeyContext(workshopId: string): string {
  return `ssh-host-key:${workshopId}`;
}

export interface SshKeyInfo {
  fingerprint: string;
  publicKey: string;
}

/** Parses one `authorized_keys` line (type, base64, optional comment). */
export function parsePublicKey(line: string): { key: ParsedKey; normalized: string; fingerprint: string } | undefined {
  const text = line.trim();
  if (!text || text.length > 16 << 10 || text.includes('\n')) return undefined;
  const parsed = utils.parseKey(text);
  if (parsed instanceof Error) return undefined;
  const key = Array.isArray(parsed) ? (parsed[0] as ParsedKey | undefined) : parsed;
  if (!key || key.isPrivateKey()) return undefined;
  const blob = key.getPublicSSH();
  // As `ssh-keygen -l` prints it: unpadded base64 of the SHA-256 of the key blob.
  const fingerprint = `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
  return { key, normalized: `${key.type} ${blob.toString('base64')}`, fingerprint };
}

/**
 * The SSH endpoint of every workshop. It is reached at port 22 of a workshop through an
 * authenticated tunnel (`atelier port-forward --stdio ID 22`, the managed SSH config's
 * ProxyCommand), and serves what Remote-SSH needs: shell, exec, PTY, sftp, direct-tcpip,
 * env and exit statuses. Public-key authentication only, with the keys the tunnel's user
 * registered (`atelier config-ssh`); one host key per workshop, pinned by the managed config.
 */
export class SshEndpoint {
  private readonly servers = new Map<string, InstanceType<typeof Server>>();

  constructor(
    private readonly pool: Pool,
    private readonly sealer: Sealer,
    /** Dials the ports of `ssh -L` inside workshops. */
    private readonly driver: Pick<WorkshopDriver, 'connect'>,
    private readonly log: { warn(obj: object, msg?: string): void },
  ) {}

  /** The workshop's host key pair (made on first use): private key OpenSSH format, public key one line. */
  async hostKey(workshopId: string): Promise<{ privateKey: string; publicKey: string }> {
    const [row] = await queryRows<{ private_key: string | null; private_key_sealed: string | null; public_key: string }>(
      this.pool,
      'SELECT private_key, private_key_sealed, public_key FROM workshop_host_keys WHERE workshop_id = $1',
      [workshopId],
    );
    if (row?.private_key_sealed)
      return {
        privateKey: this.sealer.decrypt(row.private_key_sealed, hostKeyContext(workshopId)).toString('utf8'),
        publicKey: row.public_key,
      };
    if (row?.private_key) {
      // Written before keys were sealed (migration 013) and not yet sealed at start: seal it now.
      await this.sealStoredKeys();
      return this.hostKey(workshopId);
    }
    const pair = utils.generateKeyPairSync('ed25519', {});
    const publicKey = pair.public.trim().split(/\s+/).slice(0, 2).join(' ');
    await queryRows(
      this.pool,
      'INSERT INTO workshop_host_keys (workshop_id, private_key_sealed, public_key) VALUES ($1, $2, $3) ON CONFLICT (workshop_id) DO NOTHING',
      [workshopId, this.sealer.encrypt(pair.private, hostKeyContext(workshopId)), publicKey],
    );
    return this.hostKey(workshopId);
  }

  /**
   * Seals the host keys stored in clear by a server older than migration 013 (same key pairs:
   * the fingerprints pinned in users' SSH configs stay valid). Returns how many were sealed.
   */
  async sealStoredKeys(): Promise<number> {
    const rows = await queryRows<{ workshop_id: string; private_key: string }>(
      this.pool,
      'SELECT workshop_id, private_key FROM workshop_host_keys WHERE private_key IS NOT NULL',
      [],
    );
    let sealed = 0;
    for (const r of rows) {
      const done = await queryRows(
        this.pool,
        'UPDATE workshop_host_keys SET private_key_sealed = $2, private_key = NULL WHERE workshop_id = $1 AND private_key = $3 RETURNING 1',
        [r.workshop_id, this.sealer.encrypt(r.private_key, hostKeyContext(r.workshop_id)), r.private_key],
      );
      sealed += done.length;
    }
    return sealed;
  }

  /** Registers a public key for a user (idempotent). */
  async addKey(userId: string, line: string): Promise<SshKeyInfo | undefined> {
    const parsed = parsePublicKey(line);
    if (!parsed) return undefined;
    await queryRows(
      this.pool,
      'INSERT INTO ssh_keys (user_id, fingerprint, public_key) VALUES ($1, $2, $3) ON CONFLICT (user_id, fingerprint) DO NOTHING',
      [userId, parsed.fingerprint, parsed.normalized],
    );
    return { fingerprint: parsed.fingerprint, publicKey: parsed.normalized };
  }

  async keys(userId: string): Promise<SshKeyInfo[]> {
    return (
      await queryRows<{ fingerprint: string; public_key: string }>(
        this.pool,
        'SELECT fingerprint, public_key FROM ssh_keys WHERE user_id = $1 ORDER BY created_at',
        [userId],
      )
    ).map((r) => ({ fingerprint: r.fingerprint, publicKey: r.public_key }));
  }

  async removeKey(userId: string, fingerprint: string): Promise<boolean> {
    return (
      (await queryRows(this.pool, 'DELETE FROM ssh_keys WHERE user_id = $1 AND fingerprint = $2 RETURNING 1', [userId, fingerprint]))
        .length > 0
    );
  }

  /** Serves one SSH connection (a tunnel's byte stream) for `userId` into the workshop. */
  async serve(stream: Duplex, target: TerminalTarget, userId: string): Promise<void> {
    const allowed = (await this.keys(userId)).map((k) => parsePublicKey(k.publicKey)?.key).filter((k): k is ParsedKey => !!k);
    let server = this.servers.get(target.id);
    if (!server) {
      const { privateKey } = await this.hostKey(target.id);
      server = new Server({ hostKeys: [privateKey], ident: 'Atelier' });
      // One 'connection' listener per tunnel still in its SSH handshake (see below).
      server.setMaxListeners(0);
      this.servers.set(target.id, server);
    }
    // The remote address fields are read by ssh2 for its 'connection' info (a socket has its own).
    if (!('remoteAddress' in stream)) Object.assign(stream, { remoteAddress: '127.0.0.1', remotePort: 0, remoteFamily: 'IPv4' });
    // ssh2 says 'connection' once the client's SSH header came: several tunnels may be opening at
    // once, each handles its own stream only; one closed before its header leaves nothing behind.
    const onConnection = (client: Connection): void => {
      if ((client as unknown as { _sock?: unknown })._sock !== stream) return;
      server!.off('connection', onConnection);
      this.handle(client, target, allowed);
    };
    server.on('connection', onConnection);
    stream.once('close', () => server!.off('connection', onConnection));
    server.injectSocket(stream as never);
  }

  /** Forgets a deleted workshop's server. */
  forget(workshopId: string): void {
    this.servers.delete(workshopId);
  }

  private handle(client: Connection, target: TerminalTarget, allowed: ParsedKey[]): void {
    client.on('error', () => undefined);
    client.on('authentication', (ctx: AuthContext) => {
      if (ctx.method !== 'publickey') return ctx.reject(['publickey']);
      const key = allowed.find(
        (k) =>
          k.type === ctx.key.algo && k.getPublicSSH().length === ctx.key.data.length && timingSafeEqual(k.getPublicSSH(), ctx.key.data),
      );
      if (!key) return ctx.reject(['publickey']);
      // Without a signature this is the client asking whether the key would do.
      if (!ctx.signature) return ctx.accept();
      if (key.verify(ctx.blob!, ctx.signature, ctx.hashAlgo) !== true) return ctx.reject(['publickey']);
      ctx.accept();
    });
    client.on('ready', () => {
      client.on('session', (accept) => this.session(accept(), target));
      client.on('tcpip', (accept, reject, info) => {
        // direct-tcpip (ssh -L, Remote-SSH's port forwarding): only to the workshop's own loopback.
        if (!['127.0.0.1', 'localhost', '::1'].includes(info.destIP) || info.destPort < 1 || info.destPort > 65535) return reject();
        this.driver.connect(target.sandbox, info.destPort).then(
          (socket) => {
            const channel = accept();
            socket.on('error', () => channel.destroy());
            channel.on('error', () => socket.destroy());
            socket.pipe(channel).pipe(socket);
          },
          () => reject(),
        );
      });
    });
  }

  private session(session: Session, target: TerminalTarget): void {
    let ptyInfo: PseudoTtyInfo | undefined;
    let pty: PtySession | undefined;
    const env: Record<string, string> = {};
    session.on('pty', (accept, _reject, info) => {
      ptyInfo = info;
      accept?.();
    });
    session.on('window-change', (accept, _reject, info) => {
      if (ptyInfo) ptyInfo = { ...ptyInfo, cols: info.cols, rows: info.rows };
      pty?.resize(info.cols || 80, info.rows || 24);
      accept?.();
    });
    session.on('env', (accept, reject, info) => {
      if (Object.keys(env).length >= MAX_ENV || !/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(info.key)) return reject?.();
      env[info.key] = info.val;
      accept?.();
    });
    session.on('signal', (accept, _reject, info) => {
      pty?.signal(`SIG${info.name}`);
      accept?.();
    });
    const run = (channel: ServerChannel, command: string[]): void => {
      if (ptyInfo) pty = runPty(channel, target, command, ptyInfo, env);
      else runPlain(channel, target, command, env);
    };
    session.on('shell', (accept) => run(accept(), [SHELL, '-l']));
    session.on('exec', (accept, _reject, info) => run(accept(), [SHELL, '-c', info.command]));
    session.on('subsystem', (accept, reject, info) => {
      if (info.name !== 'sftp') return reject();
      runPlain(accept(), target, [SFTP_SERVER], {});
    });
  }
}

function endChannel(channel: ServerChannel, exitCode: number, signal: string | null): void {
  try {
    if (signal) channel.exit(signal.replace(/^SIG/, ''), false, '');
    else channel.exit(exitCode);
    channel.end();
  } catch {
    // the client went away
  }
}

function runPty(
  channel: ServerChannel,
  target: TerminalTarget,
  command: string[],
  info: PseudoTtyInfo,
  env: Record<string, string>,
): PtySession {
  const session = new PtySession(target, command, {
    cols: info.cols || 80,
    rows: info.rows || 24,
    term: /^[A-Za-z0-9._+-]{1,64}$/.test(info.term) ? info.term : 'xterm-256color',
    env,
  });
  const reader = {
    write: (chunk: Buffer): boolean => channel.write(chunk),
  };
  channel.on('drain', () => session.drained(reader));
  session.attach(reader);
  channel.on('data', (d: Buffer) => {
    channel.pause();
    void session.write(d).then(() => channel.resume());
  });
  channel.on('close', () => session.close());
  channel.on('error', () => session.close());
  session.onExit(({ exitCode, signal }) => {
    session.detach(reader);
    endChannel(channel, exitCode, signal && exitCode === 128 + (osConstants.signals[signal as NodeJS.Signals] ?? 0) ? signal : null);
  });
  return session;
}

function runPlain(channel: ServerChannel, target: TerminalTarget, command: string[], env: Record<string, string>): void {
  const spec = { command, cwd: '/workspace', env: { ...target.env, ...env } };
  const { argv, env: entryEnv } = target.driver.enter(target.sandbox, spec);
  const child = spawn(argv[0]!, argv.slice(1), { detached: true, stdio: ['pipe', 'pipe', 'pipe'], env: entryEnv });
  child.on('error', () => endChannel(channel, 127, null));
  child.stdin!.on('error', () => undefined);
  channel.pipe(child.stdin!);
  child.stdout!.pipe(channel, { end: false });
  child.stderr!.pipe(channel.stderr, { end: false });
  const kill = (): void => {
    try {
      if (child.pid && child.exitCode === null) process.kill(-child.pid, 'SIGHUP');
    } catch {
      // gone
    }
  };
  channel.on('close', kill);
  let outputsOpen = 2;
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const finish = (): void => {
    if (!exit || outputsOpen > 0) return;
    const { code, signal } = exit;
    endChannel(channel, code ?? 128 + (signal ? (osConstants.signals[signal] ?? 9) : 0), signal);
  };
  for (const out of [child.stdout!, child.stderr!])
    out.once('close', () => {
      outputsOpen--;
      finish();
    });
  child.on('exit', (code, signal) => {
    exit = { code, signal };
    // A process left in the background may hold the output open: stop waiting after 2 s.
    setTimeout(() => {
      child.stdout!.destroy();
      child.stderr!.destroy();
    }, 2000).unref();
    finish();
  });
}
