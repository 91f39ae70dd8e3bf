import { after, before } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import type { NodeView, Workshop } from '../../src/core/index.js';
import { ExternalPostgres } from './postgres.js';
import { TestServer, killStrays, makeRepo } from './server.js';

/** A workshop as the API answers it (`GET /v1/workshops…`): the one shape every node test reads. */
export type Ws = Workshop;
/** A node as `GET /v1/nodes` answers it. */
export type Node = NodeView;

/** What startNodes starts: the nodes' environment, their names, and the files of the test repository. */
export interface NodesOptions {
  /** One server process per name (`--node-name`), started in this order; default node-a, node-b, node-c. */
  names?: string[];
  /** Environment for every node beside the shared master key (ATELIER_NODE_HEARTBEAT, …). */
  env?: NodeJS.ProcessEnv;
  /** The files of the repository the tests make workshops from (makeRepo's default when absent). */
  repo?: Record<string, string>;
}

/**
 * Several server processes (separate data dirs) on one external PostgreSQL with one master key:
 * one installation of nodes (docs/replicas.md). Filled in by the suite's `before`; everything it
 * holds is released by the suite's `after`.
 */
export class Nodes {
  /** The servers, in the order of `names`; each holds the first one's admin token. */
  servers: TestServer[] = [];
  /** A client of the installation's database, for what a test reads or sets there directly. */
  sql!: pg.Client;
  db!: ExternalPostgres;
  repo = '';
  /** What every node runs with: the shared master key and the options' env. */
  readonly env: NodeJS.ProcessEnv;
  private readonly keyDir = mkdtempSync('/tmp/atelier-key-');
  // Released last made first: the servers (each deletes the workshops it can reach), then the rest.
  private readonly releases: (() => Promise<void> | void)[] = [];
  private released = false;
  private starting: Promise<void> | undefined;

  private readonly made: TestServer[] = [];
  // The test process stopped by a signal (the runner's file timeout, ^C): no hook runs then, so
  // what can be released at once is, before it exits.
  private readonly onSignal = (signal: NodeJS.Signals): void => {
    this.releaseNow();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };

  constructor(private readonly opts: NodesOptions) {
    this.env = { ...opts.env, ATELIER_MASTER_KEY_FILE: join(this.keyDir, 'master.key') };
    this.releases.push(() => rmSync(this.keyDir, { recursive: true, force: true }));
    process.once('SIGTERM', this.onSignal);
    process.once('SIGINT', this.onSignal);
  }

  /**
   * A server for one more node of this installation, not started (`boot()` it): released with the
   * others. `bin`: another build's `atelier` (a rolling upgrade).
   */
  node(name: string, opts: { bin?: string; dataDir?: string } = {}): TestServer {
    const s = new TestServer(opts.dataDir ?? mkdtempSync('/tmp/atelier-test-'), ['--database-url', this.db.url, '--node-name', name]);
    s.serverEnv = this.env;
    s.bin = opts.bin;
    this.made.push(s);
    this.hold(() => s.dispose());
    return s;
  }

  start(): Promise<void> {
    this.starting ??= (async () => {
      this.db = ExternalPostgres.start();
      this.hold(() => this.db.stop());
      this.repo = makeRepo(this.opts.repo);
      this.hold(() => rmSync(this.repo, { recursive: true, force: true }));
      this.sql = new pg.Client({ connectionString: this.db.url });
      this.hold(() => this.sql.end());
      await this.sql.connect();
      for (const name of this.opts.names ?? ['node-a', 'node-b', 'node-c']) {
        const s = this.node(name);
        await s.boot();
        this.check();
        s.token = this.servers[0]?.token ?? s.token;
        this.servers.push(s);
      }
    })();
    return this.starting;
  }

  /** Stops every server (its workshops deleted first, where they can be reached), the database, and removes their files. */
  async release(): Promise<void> {
    this.released = true;
    process.off('SIGTERM', this.onSignal);
    process.off('SIGINT', this.onSignal);
    // A start still running (its hook timed out) ends at its next step: what it made is released here.
    const left = this.releases.splice(0).reverse();
    for (const r of left) {
      try {
        await r();
      } catch (err) {
        console.error(`releasing the nodes: ${(err as Error).message}`);
      }
    }
    await this.starting?.catch(() => undefined);
    // What the cut-short start made meanwhile.
    for (const r of this.releases.splice(0).reverse()) await Promise.resolve(r()).catch(() => undefined);
  }

  /** Without waiting for anything: the servers and their sandboxes killed, the database stopped, the files removed. */
  private releaseNow(): void {
    this.released = true;
    for (const s of this.made) {
      s.proc?.kill('SIGKILL');
      killStrays(s.dataDir);
      rmSync(s.dataDir, { recursive: true, force: true });
    }
    try {
      this.db?.stop();
    } catch {
      // not started
    }
    for (const dir of [this.repo, this.keyDir]) if (dir) rmSync(dir, { recursive: true, force: true });
  }

  private hold(release: () => Promise<void> | void): void {
    this.releases.push(release);
    this.check();
  }

  private check(): void {
    if (this.released) throw new Error('the nodes were released while starting (the suite was cancelled)');
  }
}

/**
 * Starts an installation of nodes for the calling `describe`: its `before` starts them, its
 * `after` releases everything, also what a start cut short (a failed boot, a hook's timeout) made.
 */
export function startNodes(opts: NodesOptions = {}): Nodes {
  const nodes = new Nodes(opts);
  before(() => nodes.start());
  after(async () => {
    // A failed run: the nodes' logs say why.
    if (process.exitCode) for (const s of nodes.servers) console.log(`--- ${s.extraArgs.join(' ')}\n${s.log}`);
    await nodes.release();
  });
  return nodes;
}
