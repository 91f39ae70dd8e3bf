import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

/** What a variable's value must be: its value as Config takes it, or why it is refused. */
type Rule<T> = (value: string) => { value: T } | { refused: string };

const text: Rule<string> = (value) => ({ value });
const oneOf =
  <const T extends string>(...allowed: T[]): Rule<T> =>
  (value) =>
    (allowed as string[]).includes(value)
      ? { value: value as T }
      : { refused: `expected one of ${allowed.map((a) => `"${a}"`).join(', ')}, got "${value}"` };
const positive: Rule<number> = (value) => {
  const n = Number(value);
  return Number.isFinite(n) && n > 0 ? { value: n } : { refused: `expected a number above 0, got "${value}"` };
};
const integer =
  (min: number, max?: number): Rule<number> =>
  (value) => {
    const n = Number(value);
    return Number.isInteger(n) && n >= min && (max === undefined || n <= max)
      ? { value: n }
      : { refused: `expected a whole number ${max === undefined ? `of at least ${min}` : `from ${min} to ${max}`}, got "${value}"` };
  };
const httpUrl: Rule<string> = (value) => {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  return url && (url.protocol === 'http:' || url.protocol === 'https:')
    ? { value }
    : { refused: `expected an http(s) URL, got "${value}"` };
};

/**
 * A Teams Workflows webhook: https (the URL carries its own signature, which must not cross the
 * network in clear); plain http only to a loopback address (a local stand-in, tests).
 */
const teamsWebhookUrl: Rule<string> = (value) => {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  const loopback = url !== undefined && /^(127\.\d+\.\d+\.\d+|\[::1\]|localhost)$/.test(url.hostname);
  return url && (url.protocol === 'https:' || (url.protocol === 'http:' && loopback))
    ? { value }
    : {
        refused: `expected the https URL of a Teams Workflows webhook (in Teams: Workflows → "Post to a channel when a webhook request is received" → copy its URL), got "${value.slice(0, 40)}${value.length > 40 ? '…' : ''}"`,
      };
};

/** `500ms`, `2s`, `1m`, `3` (seconds): milliseconds from `min` to `max`. */
const durationMs =
  (min: number, max: number): Rule<number> =>
  (value) => {
    const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$/.exec(value);
    const ms = m ? Math.round(Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm']) : NaN;
    const say = (n: number): string => (n % 1000 === 0 ? `${n / 1000}s` : `${n}ms`);
    return Number.isFinite(ms) && ms >= min && ms <= max
      ? { value: ms }
      : { refused: `expected a duration from ${say(min)} to ${say(max)} (for example 500ms, 2s or 1m), got "${value}"` };
  };

/**
 * Every environment variable Atelier reads, in one place. Flags given on the command line
 * override these; these override the defaults written here.
 *
 * | variable                    | field            | default                                              |
 * |-----------------------------|------------------|------------------------------------------------------|
 * | ATELIER_DATA_DIR            | dataDir          | $XDG_DATA_HOME/atelier; root without XDG_DATA_HOME: /var/lib/atelier |
 * | ATELIER_LISTEN              | listen           | 127.0.0.1:7878                                       |
 * | ATELIER_DATABASE_URL        | databaseUrl      | (none: embedded PostgreSQL in DATA_DIR/pg)            |
 * | ATELIER_ALLOW_REPO_ROOTS    | allowRepoRoots   | the user's home and the current directory (`:`-separated) |
 * | ATELIER_LOG_LEVEL           | logLevel         | info                                                 |
 * | ATELIER_PG_BIN_DIR          | pgBinDir         | newest /usr/lib/postgresql/<v>/bin                    |
 * | ATELIER_DEFAULT_CPUS        | defaultCpus      | 2                                                    |
 * | ATELIER_DEFAULT_MEMORY      | defaultMemory    | 2g                                                   |
 * | ATELIER_DEFAULT_PIDS        | defaultPids      | 1024                                                 |
 * | ATELIER_UID_BASE            | uidBase          | 600000 (first host uid given to a workshop, as root) |
 * | ATELIER_DEFAULT_DISK        | defaultDiskBytes | 5g: disk quota of a workshop created without --disk (everything it writes, simulators included) |
 * | ATELIER_MAX_DISK            | maxDiskBytes     | 100g: the largest --disk a user may ask for |
 * | ATELIER_DISK_RESERVE        | diskReserveBytes | 2g: kept free on the data dir's filesystem for the server's database; new workshops are refused when the quotas promised would eat into it |
 * | ATELIER_SERVER_RESERVE_MEMORY | serverReserveMemoryBytes | 1g: memory kept for the server and its PostgreSQL: all workshops together (simulators included) may use the host's memory minus this (root, cgroup v1; see docs/server.md) |
 * | ATELIER_WORKSHOPS_CPU_SHARES | workshopsCpuShares | 256: cpu.shares of all workshops together, against 1024 for each busy thread of the server and its PostgreSQL (2-1024; 1024: no CPU kept for the server) |
 * | ATELIER_DISK_QUOTA          | diskQuota        | on: each workshop gets a loop-mounted filesystem of its quota (root only; rootless servers run without); `off`: none (benchmarks, hosts without loop devices) |
 * | ATELIER_DISK_SPARES         | diskSpares       | 1: formatted disks of the default size kept ready, so that a create does not wait for mkfs |
 * | ATELIER_CONFIG_DIR          | configDir        | $XDG_CONFIG_HOME/atelier or ~/.config/atelier        |
 * | ATELIER_CONTEXT             | context          | the config file's current context                    |
 * | ATELIER_TOKEN, ATELIER_URL  | token, url       | override the context (automation, in-workshop use)    |
 * | SUDO_UID, SUDO_GID          | sudoUser         | set by sudo: that user's CLI is also given the context |
 * | ATELIER_PUBLIC_URL          | publicUrl        | http://<listen address> (what browsers and CLIs use to reach the server; the embedded issuer is <publicUrl>/oidc) |
 * | ATELIER_TLS_CERT, ATELIER_TLS_KEY | tls.cert, tls.key | (none: no HTTPS) PEM certificate (chain) and key the server serves HTTPS with; re-read when they change (renewal) |
 * | ATELIER_TLS_LISTEN          | tls.listen       | 0.0.0.0:443 (with ATELIER_TLS_CERT): where HTTPS is served |
 * | ATELIER_TLS_RENEW_DAYS      | tls.renewDays    | 30: a certificate `server install` made (ACME, local CA) is renewed by the server with fewer days left |
 * | ATELIER_WEB_DIR             | webDir           | the repository's web/dist: the built dashboard the server serves at / |
 * | ATELIER_IDENTITY_CONFIG     | identityConfig   | (none: the embedded OIDC issuer) YAML file naming an external issuer and its group mapping |
 * | ATELIER_MASTER_KEY_FILE     | masterKeyFile    | DATA_DIR/master.key (replicas sharing a database must share this file) |
 * | ATELIER_TENANT              | tenant           | the context's tenant, else the user's first                |
 * | ATELIER_EGRESS_DEFAULTS     | egressDefaults   | the platform allowlist every workshop starts with (`,`-separated; `none` for none) |
 * | ATELIER_EGRESS_ALLOW_RANGES | egressAllowRanges| (none) CIDR ranges of private/loopback addresses workshops may reach (`,`-separated) |
 * | ATELIER_EGRESS_DNS          | egressDns        | the nameservers of /etc/resolv.conf (`,`-separated addresses) |
 * | ATELIER_EGRESS_HOSTS        | egressHosts      | (none) a hosts-format file whose names the proxy resolves first (air-gapped sites, tests) |
 * | ATELIER_EGRESS_UPSTREAM_CA  | egressUpstreamCa | (none) a PEM file of certificate authorities trusted for brokered upstreams besides the host's store (a corporate CA, tests) |
 * | ATELIER_LLM_GATEWAY         | llmGateway       | (none) a YAML file of the LLM gateway's providers and prices (docs/egress.md) |
 * | ATELIER_SIMULATORS_WARM     | simulatorsWarm   | 1: prepare the PostgreSQL simulator template at start (0: on first use) |
 * | ATELIER_TRUST_PROXY         | trustProxy       | (none) addresses/CIDRs of reverse proxies whose X-Forwarded-For is believed (client addresses for login rate limits) |
 * | ATELIER_APPROVAL_TTL        | approvalTtl      | 15m for every category; `15m,SECRET_REQUEST=5m,PR_GATEWAY=1h` (the default first, then per category) |
 * | ATELIER_APPROVALS_SELF_CONFIRM | approvalsSelfConfirm | off; `sole-maintainer`: a workshop's owner alone able to decide in its tenant may confirm what they filed by hand (never an agent's request) |
 * | ATELIER_SLACK_WEBHOOK_URL   | slack.webhookUrl | (none) incoming-webhook URL approval requests are posted to |
 * | ATELIER_SLACK_BOT_TOKEN     | slack.botToken   | (none) bot token (chat.postMessage/update, users.info); with ATELIER_SLACK_CHANNEL |
 * | ATELIER_SLACK_CHANNEL       | slack.channel    | (none) channel id the bot posts to |
 * | ATELIER_SLACK_SIGNING_SECRET| slack.signingSecret | (none) verifies /v1/webhooks/slack/interactions (without it every call is 401) |
 * | ATELIER_SLACK_API_URL       | slack.apiUrl     | https://slack.com/api |
 * | ATELIER_TEAMS_WEBHOOK_URL   | teams.webhookUrl | (none) a Teams Workflows webhook URL (https; http only to a loopback address): each request is posted there as an Adaptive Card |
 * | ATELIER_COCKPIT_WRITES      | cockpitWrites    | copy-command: browsers get the CLI command for apply/rollback; `apply` lets a same-origin request with the CSRF token apply |
 * | ATELIER_ACTIONS_PLAN_TTL    | actionsPlanTtl   | 600 (seconds a typed action's plan may be applied after it was made) |
 * | ATELIER_STACKS_BACKEND      | stacksBackend    | native: stacks are processes supervised by the server; `docker`/`podman`: that engine's compose; `compose`: the first engine whose `compose version` answers; `auto`: that, else native |
 * | DISPLAY, WAYLAND_DISPLAY    | canOpenBrowser   | `atelier auth login` opens a browser only in a graphical session |
 * | TERM                        | term             | (none) the terminal type `atelier ssh` and `run` give the workshop's PTY (else xterm-256color) |
 * | ATELIER_SSH_CONFIG          | sshConfigFile    | ~/.ssh/config (the file `atelier config-ssh` keeps its managed block in) |
 * | ATELIER_NODE_HEARTBEAT      | nodeHeartbeatMs  | 2s: how often this node heartbeats in the shared database (100ms-60s; docs/replicas.md) |
 * | ATELIER_NODE_DEAD_AFTER     | nodeDeadAfterMs  | 10s: a node silent this long is unreachable to this one, its workshops NodeUnreachable (1s-1h, at least 3 heartbeats; the same on every node) |
 * | ATELIER_K8S_KUBECONFIG      | kubeWorkshops.kubeconfig | (none: off) in progress (docs/kubernetes.md): a kubeconfig file, or `in-cluster`, for the `Workshop` resource's controller; with ATELIER_K8S_WORKSHOPS_NAMESPACE and _OWNER |
 * | ATELIER_K8S_WORKSHOPS_NAMESPACE | kubeWorkshops.namespace | (none) the namespace of the `Workshop` objects (and of the controller's Lease) |
 * | ATELIER_K8S_WORKSHOPS_OWNER | kubeWorkshops.owner | (none) the user who owns the workshops made from `Workshop` objects and whose rights the controller acts with (a maintainer to manage everyone's) |
 * | ATELIER_K8S_WORKSHOPS_TENANT | kubeWorkshops.tenant | default: the tenant whose workshops the namespace holds |
 * | ATELIER_K8S_LEASE_NAMESPACE | kubeWorkshops.leaseNamespace | the pod's own namespace in a cluster (in-cluster), else the Workshop objects' one: where the controller's Lease is |
 * | ATELIER_K8S_LEASE_DURATION  | kubeWorkshops.leaseMs | 15s: the controller's Lease; a replica takes over this long after the leader stopped renewing (1s-5m) |
 * | ATELIER_K8S_RESYNC          | kubeWorkshops.resyncMs | 5s: how often the controller compares every object with every workshop besides watch events (workshops made through the API show within this) (100ms-10m) |
 * | KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT | kubeWorkshops.inCluster | set by Kubernetes in every pod: the API server for `in-cluster` |
 *
 * The root data dir is not under /root because the embedded PostgreSQL runs as the
 * unprivileged `postgres` user, which must be able to reach its cluster directory.
 *
 * Each is checked by hand rather than with a zod schema: loadConfig runs at the start of every
 * CLI command, and loading zod and building this schema was ~15 ms of each
 * (docs/development.md, "How the CLI starts fast").
 */
const ENV = {
  TERM: text,
  ATELIER_SSH_CONFIG: text,
  ATELIER_DATA_DIR: text,
  ATELIER_LISTEN: text,
  ATELIER_DATABASE_URL: text,
  ATELIER_ALLOW_REPO_ROOTS: text,
  ATELIER_LOG_LEVEL: oneOf('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
  ATELIER_PG_BIN_DIR: text,
  ATELIER_DEFAULT_CPUS: positive,
  ATELIER_DEFAULT_MEMORY: text,
  ATELIER_DEFAULT_PIDS: integer(1),
  ATELIER_UID_BASE: integer(10000),
  ATELIER_DEFAULT_DISK: text,
  ATELIER_MAX_DISK: text,
  ATELIER_DISK_RESERVE: text,
  ATELIER_SERVER_RESERVE_MEMORY: text,
  ATELIER_WORKSHOPS_CPU_SHARES: integer(2, 1024),
  ATELIER_DISK_QUOTA: oneOf('on', 'off'),
  ATELIER_DISK_SPARES: integer(0, 16),
  ATELIER_SIMULATORS_WARM: oneOf('0', '1'),
  ATELIER_CONFIG_DIR: text,
  ATELIER_CONTEXT: text,
  ATELIER_TOKEN: text,
  ATELIER_URL: text,
  ATELIER_PUBLIC_URL: httpUrl,
  ATELIER_WEB_DIR: text,
  ATELIER_TLS_CERT: text,
  ATELIER_TLS_KEY: text,
  ATELIER_TLS_LISTEN: text,
  ATELIER_TLS_RENEW_DAYS: integer(1, 3650),
  ATELIER_LLM_GATEWAY: text,
  ATELIER_IDENTITY_CONFIG: text,
  ATELIER_MASTER_KEY_FILE: text,
  ATELIER_TENANT: text,
  ATELIER_EGRESS_DEFAULTS: text,
  ATELIER_EGRESS_ALLOW_RANGES: text,
  ATELIER_EGRESS_DNS: text,
  ATELIER_EGRESS_HOSTS: text,
  ATELIER_EGRESS_UPSTREAM_CA: text,
  ATELIER_TRUST_PROXY: text,
  ATELIER_APPROVAL_TTL: text,
  ATELIER_APPROVALS_SELF_CONFIRM: oneOf('off', 'sole-maintainer'),
  ATELIER_SLACK_WEBHOOK_URL: httpUrl,
  ATELIER_SLACK_BOT_TOKEN: text,
  ATELIER_SLACK_CHANNEL: text,
  ATELIER_SLACK_SIGNING_SECRET: text,
  ATELIER_SLACK_API_URL: httpUrl,
  ATELIER_TEAMS_WEBHOOK_URL: teamsWebhookUrl,
  ATELIER_COCKPIT_WRITES: oneOf('apply', 'copy-command'),
  ATELIER_ACTIONS_PLAN_TTL: integer(1, 86400),
  ATELIER_STACKS_BACKEND: oneOf('native', 'auto', 'compose', 'docker', 'podman'),
  ATELIER_NODE_HEARTBEAT: durationMs(100, 60_000),
  ATELIER_NODE_DEAD_AFTER: durationMs(1000, 3_600_000),
  ATELIER_K8S_KUBECONFIG: text,
  ATELIER_K8S_WORKSHOPS_NAMESPACE: text,
  ATELIER_K8S_WORKSHOPS_OWNER: text,
  ATELIER_K8S_WORKSHOPS_TENANT: text,
  ATELIER_K8S_LEASE_NAMESPACE: text,
  ATELIER_K8S_LEASE_DURATION: durationMs(1000, 300_000),
  ATELIER_K8S_RESYNC: durationMs(100, 600_000),
  KUBERNETES_SERVICE_HOST: text,
  KUBERNETES_SERVICE_PORT: integer(1, 65535),
  DISPLAY: text,
  WAYLAND_DISPLAY: text,
  SUDO_UID: integer(0),
  SUDO_GID: integer(0),
  XDG_DATA_HOME: text,
  XDG_CONFIG_HOME: text,
  HOME: text,
} satisfies Record<string, Rule<unknown>>;

type Env = { [K in keyof typeof ENV]?: (typeof ENV)[K] extends Rule<infer T> ? T : never };

function readEnv(env: NodeJS.ProcessEnv): Env {
  const out: Record<string, unknown> = {};
  for (const [name, rule] of Object.entries(ENV) as [string, Rule<unknown>][]) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const r = rule(raw);
    if ('refused' in r) throw new Error(`invalid environment variable ${name}: ${r.refused}`);
    out[name] = r.value;
  }
  return out as Env;
}

export interface Config {
  dataDir: string;
  listen: string;
  databaseUrl: string | undefined;
  allowRepoRoots: string[];
  logLevel: string;
  pgBinDir: string | undefined;
  defaultCpus: number;
  defaultMemory: string;
  defaultPids: number;
  uidBase: number;
  defaultDiskBytes: number;
  maxDiskBytes: number;
  diskReserveBytes: number;
  /** Memory no workshop may take, kept for the server and its PostgreSQL (ATELIER_SERVER_RESERVE_MEMORY). */
  serverReserveMemoryBytes: number;
  /** cpu.shares of all workshops together (ATELIER_WORKSHOPS_CPU_SHARES). */
  workshopsCpuShares: number;
  diskQuota: boolean;
  diskSpares: number;
  configDir: string;
  context: string | undefined;
  token: string | undefined;
  url: string | undefined;
  isRoot: boolean;
  publicUrl: string | undefined;
  /** HTTPS beside the plain listener (ATELIER_TLS_CERT and ATELIER_TLS_KEY, both or neither). */
  tls: { cert: string; key: string; listen: string; renewDays: number } | undefined;
  /** The built dashboard (undefined: the repository's web/dist). */
  webDir: string | undefined;
  identityConfig: string | undefined;
  masterKeyFile: string | undefined;
  tenant: string | undefined;
  /** A graphical session (DISPLAY / WAYLAND_DISPLAY, or macOS): `auth login` may open a browser. */
  canOpenBrowser: boolean;
  /** TERM of the CLI's terminal, given to PTYs in workshops. */
  term: string | undefined;
  /** The OpenSSH client config that `atelier config-ssh` manages a block in. */
  sshConfigFile: string;
  egressDefaults: string[];
  /** Prepare the simulators' templates at start rather than on first use. */
  simulatorsWarm: boolean;
  trustProxy: string[];
  egressAllowRanges: string[];
  egressDns: string[] | undefined;
  egressHosts: string | undefined;
  /** Extra CAs for the credential broker's upstreams (ATELIER_EGRESS_UPSTREAM_CA). */
  egressUpstreamCa: string | undefined;
  /** The LLM gateway's file: providers and prices (ATELIER_LLM_GATEWAY). */
  llmGateway: string | undefined;
  /** How long an approval request waits for a decision (ATELIER_APPROVAL_TTL, parsed by approvals). */
  approvalTtl: string | undefined;
  /** Whether a sole maintainer may confirm what they filed by hand (ATELIER_APPROVALS_SELF_CONFIRM). */
  approvalsSelfConfirm: 'off' | 'sole-maintainer';
  /** Slack notifications and interactions for approvals (all optional). */
  slack: { webhookUrl?: string; botToken?: string; channel?: string; signingSecret?: string; apiUrl: string };
  /** Microsoft Teams notifications for approvals (optional). */
  teams: { webhookUrl?: string };
  cockpitWrites: 'apply' | 'copy-command';
  actionsPlanTtl: number;
  stacksBackend: 'native' | 'auto' | 'compose' | 'docker' | 'podman';
  /** How often this node heartbeats (ATELIER_NODE_HEARTBEAT). */
  nodeHeartbeatMs: number;
  /** How long another node may be silent before it is unreachable (ATELIER_NODE_DEAD_AFTER). */
  nodeDeadAfterMs: number;
  /** The user who ran `sudo atelier server start`, whose CLI gets the `local` context too. */
  sudoUser: { uid: number; gid: number } | undefined;
  /** The `Workshop` resource's controller (ATELIER_K8S_*; in progress, off by default). */
  kubeWorkshops:
    | {
        /** A kubeconfig file, or `in-cluster` (the pod's service account). */
        kubeconfig: string;
        namespace: string;
        /** The user (name) who owns the workshops made from objects, and whose rights the controller uses. */
        owner: string;
        /** The tenant whose workshops the namespace holds. */
        tenant: string;
        /** Where the controller's Lease is (the chart lets the server write leases in its own namespace only). */
        leaseNamespace?: string;
        leaseMs: number;
        resyncMs: number;
        /** The in-cluster API address (KUBERNETES_SERVICE_HOST/PORT), for `in-cluster`. */
        inCluster?: { host: string; port: number };
      }
    | undefined;
}

/**
 * The platform allowlist when the admin sets none: the package registries and source hosts an
 * agent needs to install and fetch code, and the model APIs of the agents Atelier presets.
 */
export const DEFAULT_EGRESS_ALLOW = [
  'registry.npmjs.org',
  'registry.yarnpkg.com',
  'pypi.org',
  'files.pythonhosted.org',
  'github.com',
  'codeload.github.com',
  'objects.githubusercontent.com',
  'raw.githubusercontent.com',
  'proxy.golang.org',
  'sum.golang.org',
  'crates.io',
  'static.crates.io',
  'index.crates.io',
  'api.anthropic.com',
  'generativelanguage.googleapis.com',
];

/** Reads and validates the environment once; the only reader of `process.env`. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  // An empty variable counts as unset, as shells and most tools treat it.
  const e = readEnv(env);
  const size = (
    name: 'ATELIER_DEFAULT_DISK' | 'ATELIER_MAX_DISK' | 'ATELIER_DISK_RESERVE' | 'ATELIER_SERVER_RESERVE_MEMORY',
    fallback: string,
  ): number => {
    const bytes = parseSize(e[name] ?? fallback);
    if (bytes === undefined) throw new Error(`invalid environment variable ${name}: "${e[name]}" is not a size (for example 10g or 512m)`);
    return bytes;
  };
  const nodeHeartbeatMs = e.ATELIER_NODE_HEARTBEAT ?? 2000;
  const nodeDeadAfterMs = e.ATELIER_NODE_DEAD_AFTER ?? 10_000;
  // Fewer than 3 heartbeats in the timeout: one slow heartbeat would show a live node's workshops unreachable.
  if (nodeDeadAfterMs < 3 * nodeHeartbeatMs)
    throw new Error(
      `invalid environment variable ATELIER_NODE_DEAD_AFTER: ${nodeDeadAfterMs} ms is less than 3 heartbeats of ${nodeHeartbeatMs} ms ` +
        `(ATELIER_NODE_HEARTBEAT${e.ATELIER_NODE_HEARTBEAT === undefined ? ', by default' : ''}): raise it to at least ${3 * nodeHeartbeatMs} ms, or heartbeat more often`,
    );
  const home = e.HOME ?? homedir();
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const dataHome = e.XDG_DATA_HOME ?? join(home, '.local', 'share');
  const configHome = e.XDG_CONFIG_HOME ?? join(home, '.config');
  return {
    // $XDG_DATA_HOME/atelier when XDG_DATA_HOME is set; root's default home (/root) is closed to
    // the postgres user, so without it root uses /var/lib/atelier.
    dataDir: resolve(e.ATELIER_DATA_DIR ?? (isRoot && !e.XDG_DATA_HOME ? '/var/lib/atelier' : join(dataHome, 'atelier'))),
    listen: e.ATELIER_LISTEN ?? '127.0.0.1:7878',
    databaseUrl: e.ATELIER_DATABASE_URL,
    allowRepoRoots: (e.ATELIER_ALLOW_REPO_ROOTS?.split(':') ?? [home, process.cwd()]).filter(Boolean).map((p) => resolve(p)),
    logLevel: e.ATELIER_LOG_LEVEL ?? 'info',
    pgBinDir: e.ATELIER_PG_BIN_DIR,
    defaultCpus: e.ATELIER_DEFAULT_CPUS ?? 2,
    defaultMemory: e.ATELIER_DEFAULT_MEMORY ?? '2g',
    defaultPids: e.ATELIER_DEFAULT_PIDS ?? 1024,
    uidBase: e.ATELIER_UID_BASE ?? 600000,
    defaultDiskBytes: size('ATELIER_DEFAULT_DISK', '5g'),
    maxDiskBytes: size('ATELIER_MAX_DISK', '100g'),
    diskReserveBytes: size('ATELIER_DISK_RESERVE', '2g'),
    serverReserveMemoryBytes: size('ATELIER_SERVER_RESERVE_MEMORY', '1g'),
    workshopsCpuShares: e.ATELIER_WORKSHOPS_CPU_SHARES ?? 256,
    diskQuota: e.ATELIER_DISK_QUOTA !== 'off',
    diskSpares: e.ATELIER_DISK_SPARES ?? 1,
    simulatorsWarm: e.ATELIER_SIMULATORS_WARM !== '0',
    configDir: resolve(e.ATELIER_CONFIG_DIR ?? join(configHome, 'atelier')),
    context: e.ATELIER_CONTEXT,
    token: e.ATELIER_TOKEN,
    url: e.ATELIER_URL,
    isRoot,
    publicUrl: e.ATELIER_PUBLIC_URL?.replace(/\/+$/, ''),
    tls: tlsOf(e.ATELIER_TLS_CERT, e.ATELIER_TLS_KEY, e.ATELIER_TLS_LISTEN, e.ATELIER_TLS_RENEW_DAYS),
    webDir: e.ATELIER_WEB_DIR ? resolve(e.ATELIER_WEB_DIR) : undefined,
    identityConfig: e.ATELIER_IDENTITY_CONFIG ? resolve(e.ATELIER_IDENTITY_CONFIG) : undefined,
    masterKeyFile: e.ATELIER_MASTER_KEY_FILE ? resolve(e.ATELIER_MASTER_KEY_FILE) : undefined,
    tenant: e.ATELIER_TENANT,
    egressDefaults:
      e.ATELIER_EGRESS_DEFAULTS === 'none'
        ? []
        : (e.ATELIER_EGRESS_DEFAULTS?.split(',')
            .map((x) => x.trim())
            .filter(Boolean) ?? DEFAULT_EGRESS_ALLOW),
    trustProxy:
      e.ATELIER_TRUST_PROXY?.split(',')
        .map((x) => x.trim())
        .filter(Boolean) ?? [],
    egressAllowRanges:
      e.ATELIER_EGRESS_ALLOW_RANGES?.split(',')
        .map((x) => x.trim())
        .filter(Boolean) ?? [],
    egressDns: e.ATELIER_EGRESS_DNS?.split(',')
      .map((x) => x.trim())
      .filter(Boolean),
    egressHosts: e.ATELIER_EGRESS_HOSTS ? resolve(e.ATELIER_EGRESS_HOSTS) : undefined,
    egressUpstreamCa: e.ATELIER_EGRESS_UPSTREAM_CA ? resolve(e.ATELIER_EGRESS_UPSTREAM_CA) : undefined,
    llmGateway: e.ATELIER_LLM_GATEWAY ? resolve(e.ATELIER_LLM_GATEWAY) : undefined,
    approvalTtl: e.ATELIER_APPROVAL_TTL,
    approvalsSelfConfirm: e.ATELIER_APPROVALS_SELF_CONFIRM ?? 'off',
    slack: {
      ...(e.ATELIER_SLACK_WEBHOOK_URL ? { webhookUrl: e.ATELIER_SLACK_WEBHOOK_URL } : {}),
      ...(e.ATELIER_SLACK_BOT_TOKEN ? { botToken: e.ATELIER_SLACK_BOT_TOKEN } : {}),
      ...(e.ATELIER_SLACK_CHANNEL ? { channel: e.ATELIER_SLACK_CHANNEL } : {}),
      ...(e.ATELIER_SLACK_SIGNING_SECRET ? { signingSecret: e.ATELIER_SLACK_SIGNING_SECRET } : {}),
      apiUrl: (e.ATELIER_SLACK_API_URL ?? 'https://slack.com/api').replace(/\/+$/, ''),
    },
    teams: e.ATELIER_TEAMS_WEBHOOK_URL ? { webhookUrl: e.ATELIER_TEAMS_WEBHOOK_URL } : {},
    cockpitWrites: e.ATELIER_COCKPIT_WRITES ?? 'copy-command',
    actionsPlanTtl: e.ATELIER_ACTIONS_PLAN_TTL ?? 600,
    stacksBackend: e.ATELIER_STACKS_BACKEND ?? 'native',
    nodeHeartbeatMs,
    nodeDeadAfterMs,
    canOpenBrowser: process.platform === 'darwin' || Boolean(e.DISPLAY ?? e.WAYLAND_DISPLAY),
    term: e.TERM,
    sshConfigFile: resolve(e.ATELIER_SSH_CONFIG ?? join(home, '.ssh', 'config')),
    kubeWorkshops: kubeWorkshopsOf(e),
    sudoUser: isRoot && e.SUDO_UID !== undefined && e.SUDO_UID !== 0 ? { uid: e.SUDO_UID, gid: e.SUDO_GID ?? e.SUDO_UID } : undefined,
  };
}

/** Parses `512m`, `2g`, `1.5G`, `1048576` into bytes; undefined when malformed. */
export function parseSize(value: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$/i.exec(value);
  if (!m) return undefined;
  const n = Number(m[1]);
  const unit = (m[2] ?? 'b').toLowerCase()[0];
  const mult = unit === 'k' ? 1024 : unit === 'm' ? 1024 ** 2 : unit === 'g' ? 1024 ** 3 : unit === 't' ? 1024 ** 4 : 1;
  const bytes = Math.round(n * mult);
  return Number.isFinite(bytes) ? bytes : undefined;
}

/** `5368709120` → `5.0g`, `1572864` → `1.5m`: sizes in the units parseSize reads. */
export function formatSize(bytes: number): string {
  const units: [string, number][] = [
    ['t', 1024 ** 4],
    ['g', 1024 ** 3],
    ['m', 1024 ** 2],
    ['k', 1024],
  ];
  for (const [u, n] of units) if (Math.abs(bytes) >= n) return `${(bytes / n).toFixed(1)}${u}`;
  return `${bytes}b`;
}

function kubeWorkshopsOf(e: Env): Config['kubeWorkshops'] {
  const set = (['ATELIER_K8S_KUBECONFIG', 'ATELIER_K8S_WORKSHOPS_NAMESPACE', 'ATELIER_K8S_WORKSHOPS_OWNER'] as const).filter(
    (k) => e[k] !== undefined,
  );
  if (set.length === 0) return undefined;
  if (set.length < 3)
    throw new Error(
      'ATELIER_K8S_KUBECONFIG, ATELIER_K8S_WORKSHOPS_NAMESPACE and ATELIER_K8S_WORKSHOPS_OWNER go together (the cluster, the namespace of the Workshop objects, the user who owns their workshops): set all three or none',
    );
  return {
    kubeconfig: e.ATELIER_K8S_KUBECONFIG === 'in-cluster' ? 'in-cluster' : resolve(e.ATELIER_K8S_KUBECONFIG!),
    namespace: e.ATELIER_K8S_WORKSHOPS_NAMESPACE!,
    owner: e.ATELIER_K8S_WORKSHOPS_OWNER!,
    tenant: e.ATELIER_K8S_WORKSHOPS_TENANT ?? 'default',
    ...(e.ATELIER_K8S_LEASE_NAMESPACE ? { leaseNamespace: e.ATELIER_K8S_LEASE_NAMESPACE } : {}),
    leaseMs: e.ATELIER_K8S_LEASE_DURATION ?? 15_000,
    resyncMs: e.ATELIER_K8S_RESYNC ?? 5000,
    ...(e.KUBERNETES_SERVICE_HOST ? { inCluster: { host: e.KUBERNETES_SERVICE_HOST, port: e.KUBERNETES_SERVICE_PORT ?? 443 } } : {}),
  };
}

function tlsOf(
  cert: string | undefined,
  key: string | undefined,
  listen: string | undefined,
  renewDays: number | undefined,
): Config['tls'] {
  if (cert === undefined && key === undefined) return undefined;
  if (cert === undefined || key === undefined)
    throw new Error('ATELIER_TLS_CERT and ATELIER_TLS_KEY go together: set both (the certificate and its key) or neither');
  return { cert: resolve(cert), key: resolve(key), listen: listen ?? '0.0.0.0:443', renewDays: renewDays ?? 30 };
}

/** Splits `HOST:PORT` (IPv6 in brackets) for `--listen`. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new Error(`--listen must be HOST:PORT (for example 127.0.0.1:7878), got "${value}"`);
  return { host: m[1] ?? (m[2] || '127.0.0.1'), port };
}
