import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import * as pty from 'node-pty';
import { type KubeObject } from '../src/workshops/kubernetes/client.js';
import { podExecEntry } from '../src/workshops/kubernetes/podExecMain.js';
import { portForwardEntry } from '../src/workshops/kubernetes/portForwardMain.js';
import { ControlPlane, KWOK_NODE } from './helpers/k8s.js';
import { REPO_ROOT } from './helpers/server.js';

/**
 * The streaming pieces of the Kubernetes driver (docs/kubernetes.md) against a real control plane
 * (test/helpers/k8s.ts): the programs a caller spawns, `podExecMain` (pods/exec with stdin, TTY,
 * the environment handover) and `portForwardMain` (pods/portforward), talking to the real API
 * server, which hands the streams to kwok's kubelet endpoint. kwok plays the node: it runs an
 * exec's command **on this host** and dials a port-forward's target on loopback, so these test
 * the API path and the protocols, not a container.
 */

const NS = 'atelier-stream';
const POD = 'stream-pod';
const DIST = join(REPO_ROOT, 'dist', 'workshops', 'kubernetes');

interface Run {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

describe(
  'pods/exec and pods/portforward streams on a real control plane (kwok node: commands run on this host)',
  { timeout: 600_000 },
  () => {
    let cp: ControlPlane | undefined;
    before(async () => {
      cp = await ControlPlane.start();
      await cp.namespace(NS);
      await makePod(POD);
      await makePod('never-scheduled', 'no-such-scheduler');
      // A stopped pod: kwok completes a Job's pods (its pod-complete stage): the job controller's pod ends Succeeded.
      await cp.client.request('POST', `/apis/batch/v1/namespaces/${NS}/jobs`, {
        apiVersion: 'batch/v1',
        kind: 'Job',
        metadata: { name: 'done' },
        spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'atelier.invalid/stream:test' }] } } },
      });
    });
    after(async () => {
      await cp?.stop();
    });

    async function makePod(name: string, schedulerName?: string) {
      await cp!.client.request('POST', `/api/v1/namespaces/${NS}/pods`, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name },
        spec: { ...(schedulerName ? { schedulerName } : {}), containers: [{ name: 'main', image: 'atelier.invalid/stream:test' }] },
      });
      if (schedulerName) return;
      await cp!.until(`pod ${name} is Running on ${KWOK_NODE}`, async () => {
        const p = await cp!.client.request<KubeObject & { spec: { nodeName?: string }; status: { phase: string } }>(
          'GET',
          `/api/v1/namespaces/${NS}/pods/${name}`,
        );
        return p.spec.nodeName === KWOK_NODE && p.status.phase === 'Running';
      });
    }

    /** The entry podExecMain's builder gives, run from dist/ (this file runs the sources). */
    function execEntry(command: string[], opts: { env?: Record<string, string>; tty?: boolean; pod?: string; kubeconfig?: string } = {}) {
      const entry = podExecEntry(
        { kubeconfig: opts.kubeconfig ?? cp!.kubeconfig, namespace: NS, pod: opts.pod ?? POD, container: 'main' },
        { command, env: opts.env, tty: opts.tty },
      );
      entry.argv[1] = join(DIST, 'podExecMain.js');
      return entry;
    }

    function run(argv: string[], env: Record<string, string>, input?: Buffer): Promise<Run> {
      return new Promise((resolve, reject) => {
        const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['pipe', 'pipe', 'pipe'] });
        const out: Buffer[] = [];
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => out.push(d));
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.once('error', reject);
        child.once('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr }));
        child.stdin.end(input ?? Buffer.alloc(0));
      });
    }

    const exec = (command: string[], input?: Buffer, opts: Parameters<typeof execEntry>[1] = {}) => {
      const { argv, env } = execEntry(command, opts);
      return run(argv, env, input);
    };

    it('pipes 1 MiB through a command and back intact, stderr apart, exit code 0', async () => {
      const data = randomBytes(1 << 20);
      // kwok v0.8.0 never closes the command's stdin pipe when the client's stdin ends
      // (pkg/utils/exec: it copies into the pipe and leaves it open), so a command reading to EOF
      // (`cat`, `wc -c`) would wait for ever here: `head -c` stops at the byte count instead.
      const r = await exec(['sh', '-c', 'echo started >&2; head -c 1048576; echo done >&2'], data);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout.length, data.length);
      assert.equal(createHash('sha256').update(r.stdout).digest('hex'), createHash('sha256').update(data).digest('hex'));
      assert.equal(r.stderr, 'started\ndone\n');
    });

    it('hands the environment over through stdin: quotes, newlines and $(...) intact, nothing of it in the request', async () => {
      const tricky = `it's "quoted" $(touch /tmp/atelier-pwned) \`id\` \\ back\nsecond line\n\nafter a blank line '`;
      const secret = `s3cret-${randomBytes(8).toString('hex')}`;
      const input = Buffer.from('the command reads this after the handover\n');
      const r = await exec(
        ['sh', '-c', 'printf "%s|" "$TRICKY" "$ATELIER_TOKEN" "$EMPTY"; head -c 42; env | grep -c __ATELIER_ENV_ || true'],
        input,
        { env: { TRICKY: tricky, ATELIER_TOKEN: secret, EMPTY: '' } },
      );
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout.toString(), `${tricky}|${secret}||${input.toString()}0\n`);
      // What the API server recorded of the exec requests: the preamble and the command, never a value.
      const audit = readFileSync(cp!.auditLog, 'utf8');
      const uris = audit
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { requestURI: string }).requestURI)
        .filter((u) => u.includes('/exec?'));
      assert.ok(
        uris.some((u) => decodeURIComponent(u.replaceAll('+', ' ')).includes('printf "%s|" "$TRICKY"')),
        'the exec request is in the audit log',
      );
      assert.ok(!audit.includes(secret) && !audit.includes('s3cret'), 'no value reaches the audit log');
      assert.ok(!audit.includes('blank+line') && !audit.includes('blank%20line'), 'nor the other value');
    });

    it('a failing command: the exec fails with kwok reporting the exit status (a kubelet gives the exit code itself)', async () => {
      // kwok v0.8.0 answers a non-zero exit as an InternalError "… exit status 3", not the
      // kubelet's NonZeroExitCode Status with an ExitCode cause (which the program turns into its
      // own exit code): here the program reports the failure, 125, with kwok's message.
      const r = await exec(['sh', '-c', 'echo partial; exit 3']);
      assert.equal(r.code, 125);
      assert.equal(r.stdout.toString(), 'partial\n');
      assert.match(r.stderr, /^atelier pod exec: .*exit status 3\n$/);
    });

    it('the program killed by SIGTERM closes the stream and exits 143 (128 + the signal)', async () => {
      const { argv, env } = execEntry(['sh', '-c', 'echo started; sleep 5']);
      const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['pipe', 'pipe', 'pipe'] });
      const code = new Promise<number | null>((resolve) => child.once('close', resolve));
      await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
      child.kill('SIGTERM');
      assert.equal(await code, 143);
    });

    it('a terminal: `tty` answers, the size is the caller terminal’s and follows a resize, the environment arrives unechoed', async () => {
      const { argv, env } = execEntry(
        ['sh', '-c', 'tty; stty size; printf "[%s]\\n" "$V"; while read x; do [ "$x" = q ] && exit 0; stty size; done'],
        { tty: true, env: { V: "secret 'v'\nline2" } },
      );
      const term = pty.spawn(argv[0]!, argv.slice(1), { env, cols: 100, rows: 30, name: 'xterm' });
      let out = '';
      term.onData((d) => (out += d));
      const exited = new Promise<number>((resolve) => term.onExit((e) => resolve(e.exitCode)));
      try {
        await cp!
          .until('the handed-over variable is printed', async () => /\[secret 'v'\r?\nline2\]/.test(out), 60_000)
          .catch((err: Error) => {
            throw new Error(`${err.message.split('\n')[0]}; the terminal showed ${JSON.stringify(out)}`);
          });
        assert.match(out, /\/dev\/pts\/\d+/, out);
        assert.match(out, /^30 100\r?$/m, out);
        // The resize travels as a SIGWINCH to the program, a channel-4 message, and kwok's Setsize on
        // its pty; each empty line asks the command for its size again until it has changed.
        term.resize(120, 40);
        await cp!.until(
          'the pod terminal has the new size',
          async () => {
            term.write('\r');
            return /^40 120\r?$/m.test(out);
          },
          60_000,
        );
        term.write('q\r');
        assert.doesNotMatch(out, /export V=|atelier-env/, 'the handover is neither echoed nor shown');
        assert.equal(await exited, 0);
      } finally {
        term.kill();
      }
    });

    it('refusals are clear: an unknown pod (404), a pod not running yet, a completed pod, a forbidden identity (403), a bad token (401)', async () => {
      const missing = await exec(['true'], undefined, { pod: 'no-such-pod' });
      assert.equal(missing.code, 125);
      assert.match(missing.stderr, /pods\/exec atelier-stream\/no-such-pod: 404 Not Found: .*not found/);
      const pending = await exec(['true'], undefined, { pod: 'never-scheduled' });
      assert.equal(pending.code, 125);
      assert.match(pending.stderr, /pods\/exec atelier-stream\/never-scheduled: the pod is not running yet \(phase Pending\)/);
      type PodList = { items: (KubeObject & { status: { phase: string } })[] };
      let done = '';
      await cp!.until("the Job's pod has Succeeded", async () => {
        const pods = await cp!.client.request<PodList>('GET', `/api/v1/namespaces/${NS}/pods`, undefined, {
          query: { labelSelector: 'job-name=done' },
        });
        done = pods.items.find((p) => p.status.phase === 'Succeeded')?.metadata.name ?? '';
        return done !== '';
      });
      const stopped = await exec(['true'], undefined, { pod: done });
      assert.equal(stopped.code, 125);
      assert.match(stopped.stderr, /the pod has completed \(phase Succeeded\)/);
      // A token of the namespace's default service account: authenticated, no RBAC grant.
      const token = (
        await cp!.client.request<{ status: { token: string } }>('POST', `/api/v1/namespaces/${NS}/serviceaccounts/default/token`, {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: { expirationSeconds: 600 },
        })
      ).status.token;
      const withToken = (t: string) => {
        const path = join(cp!.dir, `kubeconfig-${t.length}`);
        writeFileSync(path, readFileSync(cp!.kubeconfig, 'utf8').replace(/user: \{[^}]*\}/, `user: { token: '${t}' }`));
        return path;
      };
      const forbidden = await exec(['true'], undefined, { kubeconfig: withToken(token) });
      assert.equal(forbidden.code, 125);
      assert.match(forbidden.stderr, /403 Forbidden: .*needs `get` on pods in namespace atelier-stream/);
      const bad = await exec(['true'], undefined, { kubeconfig: withToken('not-a-token') });
      assert.equal(bad.code, 125);
      assert.match(bad.stderr, /401 Unauthorized/);
    });

    /** An echo server where kwok dials every port-forward; `sockets` holds its connections (to release them). */
    async function echoServer(sockets: Set<Socket>): Promise<Server> {
      const server = createServer((s) => {
        sockets.add(s);
        s.on('error', () => undefined);
        s.pipe(s);
      });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(cp!.ports.forward, '127.0.0.1', resolve);
      });
      return server;
    }

    const forwardEntry = (port: number) => {
      const entry = portForwardEntry({ kubeconfig: cp!.kubeconfig, namespace: NS, pod: POD }, port);
      entry.argv[1] = join(DIST, 'portForwardMain.js');
      return entry;
    };

    it('port-forward: 1 MiB each way intact; the end of stdin ends the connection and the program', async () => {
      const sockets = new Set<Socket>();
      const server = await echoServer(sockets);
      try {
        const data = randomBytes(1 << 20);
        const { argv, env } = forwardEntry(8080);
        const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['pipe', 'pipe', 'pipe'] });
        const out: Buffer[] = [];
        let got = 0;
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        const all = new Promise<void>((resolve) =>
          child.stdout.on('data', (d: Buffer) => {
            out.push(d);
            got += d.length;
            if (got >= data.length) resolve();
          }),
        );
        const code = new Promise<number | null>((resolve) => child.once('close', resolve));
        child.stdin.write(data);
        await all;
        assert.equal(Buffer.compare(Buffer.concat(out), data), 0, 'the echo came back intact');
        // kwok v0.8.0 closes neither side's TCP connection when the other ends (its tunnel waits for
        // both copies to finish and half-closes nothing): what is tested is this side's close.
        child.stdin.end();
        assert.equal(await code, 0, stderr);
      } finally {
        for (const s of sockets) s.destroy();
        await new Promise((r) => server.close(r));
      }
    });

    it('port-forward: a port nothing listens on and an unknown pod are clear errors', async () => {
      // Port 1 goes to a loopback port where nothing listens (test/helpers/k8s.ts).
      // stdin stays open: its end would close the connection before kwok's answer (no half-close).
      const { argv, env } = forwardEntry(1);
      const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['pipe', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.stdin.write('hello');
      const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
      child.stdin.destroy();
      assert.equal(code, 1);
      assert.match(stderr, /pods\/portforward atelier-stream\/stream-pod port 1: .*(failed to dial|connection refused)/);
      const missing = portForwardEntry({ kubeconfig: cp!.kubeconfig, namespace: NS, pod: 'no-such-pod' }, 8080);
      missing.argv[1] = join(DIST, 'portForwardMain.js');
      const m = await run(missing.argv, missing.env);
      assert.equal(m.code, 1);
      assert.match(m.stderr, /404 Not Found/);
    });
  },
);
