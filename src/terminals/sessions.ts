import { z } from 'zod';
import { AtelierError, describeZodError, loadYaml } from '../core/index.js';
import type { Principal } from '../identity/index.js';
import type { WorkshopService } from '../workshops/index.js';
import type { SandboxHandle } from '../sandbox/index.js';
import { adoptHeld, HeldSession, sessionsDir } from './held.js';
import type { TerminalTarget } from './pty.js';

/** Recent output kept per session for clients that reattach. */
const SCROLLBACK_BYTES = 256 << 10;
const DEFAULT_NAME = 'agent';

/**
 * `agent:` of atelier.yaml: a preset name, or `{ preset }`, or `{ command: [...], env: [...] }`
 * (env entries `KEY=VALUE`).
 */
const PRESETS: Record<string, { binary: string; install: string }> = {
  claude: { binary: 'claude', install: 'npm install -g @anthropic-ai/claude-code' },
  gemini: { binary: 'gemini', install: 'npm install -g @google/gemini-cli' },
};
const ENV_ENTRY = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,127}=/, 'env entries are KEY=VALUE');
const AgentConfig = z.union([
  z.enum(['claude', 'gemini']),
  z.strictObject({
    preset: z.enum(['claude', 'gemini']).optional(),
    command: z.array(z.string().min(1)).min(1).optional(),
    args: z.array(z.string()).optional(),
    env: z.array(ENV_ENTRY).optional(),
  }),
]);

export interface SessionInfo {
  name: string;
  command: string[];
  startedAt: string;
  attached: number;
  exitCode: number | null;
  running: boolean;
}

/**
 * How each preset is pointed at the workshop's MCP endpoint ($ATELIER_MCP_URL), without writing
 * into the repository: Claude Code gets `--mcp-config` with the JSON itself (no secret in it: the
 * endpoint knows the workshop by where the connection comes from), put last because the option
 * takes several values; Gemini CLI reads a settings file named by GEMINI_CLI_SYSTEM_SETTINGS_PATH,
 * written under the workshop's HOME (unless that variable is already set).
 */
const MCP_WIRING: Record<string, string> = {
  claude: `exec claude "$@" --mcp-config "{\\"mcpServers\\":{\\"atelier\\":{\\"type\\":\\"http\\",\\"url\\":\\"$ATELIER_MCP_URL\\"}}}"`,
  gemini:
    `if [ -z "\${GEMINI_CLI_SYSTEM_SETTINGS_PATH:-}" ]; then mkdir -p "$HOME/.atelier" && ` +
    `printf '{"mcpServers":{"atelier":{"httpUrl":"%s"}}}\\n' "$ATELIER_MCP_URL" > "$HOME/.atelier/gemini-settings.json" && ` +
    `export GEMINI_CLI_SYSTEM_SETTINGS_PATH="$HOME/.atelier/gemini-settings.json"; fi; exec gemini "$@"`,
};

/** The command a preset runs: the CLI if it is installed, else a sentence saying how to install it. */
export function presetCommand(preset: string, args: string[]): string[] {
  const p = PRESETS[preset]!;
  const wiring = MCP_WIRING[preset];
  return [
    '/bin/sh',
    '-c',
    `command -v ${p.binary} >/dev/null 2>&1 || { echo "atelier: ${p.binary} is not installed in this workshop: add \\"${p.install}\\" to the devcontainer's postCreateCommand" >&2; exit 127; }; ` +
      (wiring ? `if [ -n "\${ATELIER_MCP_URL:-}" ]; then ${wiring}; fi; ` : '') +
      `exec ${p.binary} "$@"`,
    p.binary,
    ...args,
  ];
}

/** The agent command and environment from the workspace's atelier.yaml. */
async function agentFromProject(
  service: WorkshopService,
  id: string,
  actor: Principal,
): Promise<{ command: string[]; env: Record<string, string> }> {
  let text: string;
  try {
    text = (await service.readFile(id, 'atelier.yaml', actor)).toString('utf8');
  } catch (err) {
    if (err instanceof AtelierError && err.code === 'NOT_FOUND')
      throw new AtelierError(
        'INVALID_ARGUMENT',
        'this workshop has no atelier.yaml saying which agent to run: add `agent: claude` (or gemini, or `agent: { command: [...] }`) to it, or give the command after --',
      );
    throw err;
  }
  let doc: unknown;
  try {
    doc = (await loadYaml()).parse(text);
  } catch (err) {
    throw new AtelierError('INVALID_ARGUMENT', `atelier.yaml is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const raw = (doc as { agent?: unknown } | null)?.agent;
  if (raw === undefined)
    throw new AtelierError(
      'INVALID_ARGUMENT',
      'atelier.yaml has no `agent:` entry: add `agent: claude` (or gemini, or `agent: { command: [...] }`), or give the command after --',
    );
  const r = AgentConfig.safeParse(raw);
  if (!r.success) {
    const { message } = describeZodError(r.error);
    throw new AtelierError('INVALID_ARGUMENT', `atelier.yaml agent: ${message}`, { field: 'agent' });
  }
  const a = typeof r.data === 'string' ? { preset: r.data } : r.data;
  const env: Record<string, string> = {};
  for (const e of a.env ?? []) {
    const i = e.indexOf('=');
    env[e.slice(0, i)] = e.slice(i + 1);
  }
  if (a.command) return { command: [...a.command, ...(a.args ?? [])], env };
  if (a.preset) return { command: presetCommand(a.preset, a.args ?? []), env };
  throw new AtelierError('INVALID_ARGUMENT', 'atelier.yaml agent: give a preset (claude, gemini) or a command', { field: 'agent' });
}

/**
 * Agent sessions: PTYs that belong to the workshop, not to a client. A client that goes away
 * (closed laptop, lost network) detaches; the agent goes on, and the next `attach` first sees the
 * recent output. Each PTY is held by a process of its own (`session-holder.py`), so a session
 * also outlives this server: a restarted server finds its sessions again (`adopt`), with their
 * recent output, and a workshop's sessions end when it is deleted.
 */
export class AgentSessions {
  private readonly sessions = new Map<string, HeldSession>();
  /** Starts in flight, by key: two `run`s of one name at once start one session. */
  private readonly starting = new Map<string, Promise<HeldSession>>();
  private readonly dir: string;
  /** Workshops deleted while this server runs (a start in flight for one of them is undone). */
  private readonly deleted = new Set<string>();
  /** The sessions a previous server left running, found again (every call waits for it). */
  private readonly adopted: Promise<void>;

  constructor(
    private readonly service: WorkshopService,
    private readonly log: { info(obj: object, msg?: string): void; warn(obj: object, msg?: string): void },
    dir: string,
  ) {
    this.dir = sessionsDir(dir);
    this.adopted = adoptHeld(this.dir, SCROLLBACK_BYTES).then(
      async ({ sessions, refused }) => {
        for (const s of sessions) {
          // Its workshop was deleted while no server was there: the session ends now.
          if (!(await service.isLocal(s.workshop).catch(() => true))) {
            s.close();
            continue;
          }
          if (!this.sessions.has(this.key(s.workshop, s.name))) this.sessions.set(this.key(s.workshop, s.name), s);
        }
        if (sessions.length > 0) this.log.info({ sessions: sessions.length }, 'agent sessions found running');
        if (refused.length > 0) this.log.warn({ refused }, 'agent sessions left running that this server cannot reach');
      },
      (err: unknown) => this.log.warn({ err: String(err) }, 'could not look for the agent sessions left running'),
    );
  }

  private key(id: string, name: string): string {
    return `${id}/${name}`;
  }

  get(id: string, name: string): HeldSession | undefined {
    return this.sessions.get(this.key(id, name));
  }

  private info(name: string, s: HeldSession): SessionInfo {
    return {
      name,
      command: s.command,
      startedAt: s.startedAt.toISOString(),
      attached: s.attached,
      exitCode: s.exited?.exitCode ?? null,
      running: !s.exited,
    };
  }

  async start(
    id: string,
    actor: Principal,
    req: {
      name?: string | undefined;
      command?: string[] | undefined;
      cols?: number | undefined;
      rows?: number | undefined;
      resume?: boolean | undefined;
    },
  ): Promise<{ created: boolean; session: SessionInfo & { resumed: boolean } }> {
    await this.adopted;
    const name = req.name ?? DEFAULT_NAME;
    const t = await this.service.sandboxFor(id, actor, { resume: req.resume ?? true });
    const key = this.key(t.id, name);
    // One start per name at a time: a second `run` joins the first (checked and registered
    // with no await in between).
    const inFlight = this.starting.get(key);
    if (inFlight) {
      const s = await inFlight.catch(() => undefined);
      if (s && !s.exited) return { created: false, session: { ...this.info(name, s), resumed: t.resumed } };
    }
    const existing = this.sessions.get(key);
    if (existing && !existing.exited) return { created: false, session: { ...this.info(name, existing), resumed: t.resumed } };
    const starting = this.launch(t, name, req, actor, existing);
    this.starting.set(key, starting);
    try {
      const session = await starting;
      return { created: true, session: { ...this.info(name, session), resumed: t.resumed } };
    } finally {
      if (this.starting.get(key) === starting) this.starting.delete(key);
    }
  }

  private async launch(
    t: { id: string; sandbox: SandboxHandle; env: Record<string, string> },
    name: string,
    req: { command?: string[] | undefined; cols?: number | undefined; rows?: number | undefined },
    actor: Principal,
    existing: HeldSession | undefined,
  ): Promise<HeldSession> {
    const key = this.key(t.id, name);
    const agent = req.command ? { command: req.command, env: {} } : await agentFromProject(this.service, t.id, actor);
    const env = { ...t.env, TERM: 'xterm-256color', ...agent.env };
    // The program leads a session of its own inside the sandbox, with the PTY as its terminal:
    // Ctrl-C reaches its processes, never the host-side chain that waits for them.
    const spec = { command: ['/usr/bin/setsid', '--ctty', '--wait', ...agent.command], cwd: '/workspace', env };
    // An ended session of the same name is replaced: its holder goes first (it holds the socket's name).
    existing?.close();
    if (existing) await existing.gone();
    // The chain outlives this server (its holder keeps it): the driver marks it so, and a later server leaves it running.
    const entry = this.service.driver.enter(t.sandbox, { ...spec, outlivesServer: true });
    const session = await HeldSession.start({
      dir: this.dir,
      workshop: t.id,
      name,
      command: agent.command,
      // The chain before the workshop's program runs privileged: a fixed environment, never the workshop's.
      argv: entry.argv,
      env: entry.env,
      cols: req.cols ?? 120,
      rows: req.rows ?? 40,
      scrollbackBytes: SCROLLBACK_BYTES,
    });
    if (this.deleted.has(t.id)) {
      // Its workshop was deleted while it started.
      session.close();
      throw new AtelierError('WORKSHOP_NOT_FOUND', `workshop ${t.id} was deleted`);
    }
    this.sessions.set(key, session);
    this.log.info({ workshop: t.id, session: name, command: agent.command[0] }, 'agent session started');
    return session;
  }

  async list(id: string, actor: Principal): Promise<SessionInfo[]> {
    await this.adopted;
    const w = await this.service.get(id, actor);
    const out: SessionInfo[] = [];
    for (const [key, s] of this.sessions) if (key.startsWith(`${w.id}/`)) out.push(this.info(key.slice(w.id.length + 1), s));
    return out;
  }

  /** Checks the caller may operate the workshop and that the session exists; resumes the workshop if asked. */
  async find(id: string, name: string, actor: Principal, opts: { resume: boolean }): Promise<{ target: TerminalTarget; resumed: boolean }> {
    await this.adopted;
    const t = await this.service.sandboxFor(id, actor, opts);
    if (!this.get(t.id, name))
      throw new AtelierError('NOT_FOUND', `workshop ${t.id} has no session "${name}": start one with \`atelier run ${t.id}\``, {
        session: name,
      });
    return { target: { id: t.id, sandbox: t.sandbox, env: t.env, driver: this.service.driver }, resumed: t.resumed };
  }

  async stop(id: string, name: string, actor: Principal): Promise<{ name: string; stopped: boolean }> {
    await this.adopted;
    await this.service.authorize(id, actor, 'operate');
    const s = this.get(id, name);
    if (!s) throw new AtelierError('NOT_FOUND', `workshop ${id} has no session "${name}"`, { session: name });
    s.close();
    this.sessions.delete(this.key(id, name));
    return { name, stopped: true };
  }

  /** The workshop is deleted: its sessions end, and their holders go (starts in flight too). */
  forget(id: string): void {
    this.deleted.add(id);
    if (this.deleted.size > 10_000) this.deleted.delete(this.deleted.values().next().value!);
    for (const [key, s] of this.sessions) {
      if (!key.startsWith(`${id}/`)) continue;
      s.close();
      this.sessions.delete(key);
    }
  }

  /** The server stops: the sessions go on, held, for the next server to find. */
  close(): void {
    for (const s of this.sessions.values()) s.disconnect();
    this.sessions.clear();
  }
}
