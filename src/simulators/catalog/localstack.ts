import { chmodSync, existsSync, mkdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AtelierError } from '../../core/index.js';
import { chownTree } from '../process.js';
import { AWS_SERVICES, type AwsService, type SimulatorHandle, type SimulatorMount, type SimulatorSpec } from '../types.js';
import { assertSocket } from '../socketGuard.js';
import {
  checkKeys,
  checkSocketPath,
  invalid,
  SANDBOX_SOCKETS,
  type CatalogEntry,
  type SimulatorProgram,
  type VersionAsked,
} from './entry.js';

/**
 * `localstack` simulator: one edge endpoint, like LocalStack's port 4566, routing each request
 * by its SigV4 credential scope (or X-Amz-Target) to S3 (`s3rver`), SQS (`local-aws-sqs`) or
 * DynamoDB (`dynalite`). The edge and the backends are one Node process (../awsEdge.ts), run
 * in the simulator's sandbox (lifecycle.ts), listening on `<socketDir>/<name>/edge.sock` only.
 *
 * State: S3 objects in `<dir>/s3` (files), queues and tables in memory. A reset empties all
 * three in place through a control socket in `<dir>/run/`, which the workshop cannot reach.
 *
 * Confinement: s3rver maps object keys, copy sources and upload ids to file paths without
 * refusing `..`; in its sandbox the only writable places are its S3 directory, its control and
 * socket directories and a private /tmp, and the only code it sees is Node, Atelier's
 * node_modules and the edge's own folder (read-only): a key like `../../x` cannot create,
 * read or remove anything of the host.
 */

const PORT = 4566;
const SOCKET = 'edge.sock';
const REGION = 'us-east-1';
const BACKENDS: Record<AwsService, string> = { s3: 's3rver', sqs: 'local-aws-sqs', dynamodb: 'dynalite' };

const require = createRequire(import.meta.url);
/** Inside the sandbox: Atelier's code (read-only) and the edge's state. */
const SANDBOX_CODE = '/opt/atelier';
const SANDBOX_S3 = '/sim/s3';
const SANDBOX_RUN = '/sim/run';

/** Versions of the installed backends, read from their package.json. */
function backendVersion(service: AwsService): string {
  const pkg = BACKENDS[service];
  try {
    return (JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), 'utf8')) as { version: string }).version;
  } catch {
    throw new AtelierError(
      'UNSUPPORTED',
      `the npm package ${pkg} (the ${service} backend) is not installed: run \`npm ci\` in Atelier's directory`,
      {
        type: 'localstack',
      },
    );
  }
}

/**
 * How to run the edge: the compiled `awsEdge.js` beside this folder, or, when Atelier runs from
 * its TypeScript sources (the tests), `awsEdge.ts` through tsx.
 */
function edgeScript(): string {
  const here = fileURLToPath(import.meta.url);
  return join(dirname(here), '..', `awsEdge${here.endsWith('.ts') ? '.ts' : '.js'}`);
}

/** The directory holding Atelier's code and node_modules (what the edge loads). */
function codeRoot(): string {
  return dirname(dirname(dirname(require.resolve('s3rver/package.json'))));
}

/**
 * The edge's program in its sandbox: Node, and of Atelier only its package.json (the module
 * type), its node_modules and the edge's own folder, read-only under /opt/atelier; run from its
 * TypeScript source through tsx when Atelier itself runs from its sources (the tests).
 */
function edgeProgram(): { argv: string[]; mounts: SimulatorMount[] } {
  const root = codeRoot();
  const script = edgeScript();
  const inside = (path: string): string => join(SANDBOX_CODE, relative(root, path));
  const mounts: SimulatorMount[] = [
    { src: join(root, 'package.json'), dest: inside(join(root, 'package.json')) },
    { src: join(root, 'node_modules'), dest: inside(join(root, 'node_modules')) },
    { src: dirname(script), dest: inside(dirname(script)) },
  ];
  // Node outside /usr (a tarball under /opt): its own installation, read-only, where it is.
  const node = realpathSync(process.execPath);
  if (!node.startsWith('/usr/')) mounts.push({ src: dirname(dirname(node)), dest: dirname(dirname(node)) });
  const loader = script.endsWith('.ts') ? ['--import', `file://${inside(fileURLToPath(import.meta.resolve('tsx')))}`] : [];
  return { argv: [node, ...loader, inside(script)], mounts };
}

function servicesOf(spec: SimulatorSpec): AwsService[] {
  let asked: unknown = spec.services;
  let field = 'services';
  if (asked === undefined && spec.env?.SERVICES !== undefined) {
    asked = spec.env.SERVICES.split(',').map((s) => s.trim());
    field = 'env.SERVICES';
  }
  if (asked === undefined) return [...AWS_SERVICES];
  if (!Array.isArray(asked) || asked.length === 0) {
    throw invalid(`localstack simulator ${spec.name}: ${field} must be a non-empty list of ${AWS_SERVICES.join(', ')}`, { field });
  }
  const out: AwsService[] = [];
  for (const s of asked as unknown[]) {
    const name = typeof s === 'string' ? s.toLowerCase() : s;
    if (typeof name !== 'string' || !(AWS_SERVICES as readonly string[]).includes(name)) {
      throw invalid(
        `localstack simulator ${spec.name}: unknown service ${JSON.stringify(s)} in ${field}: this simulator runs ${AWS_SERVICES.join(', ')}`,
        { field, known: [...AWS_SERVICES] },
      );
    }
    if (!out.includes(name as AwsService)) out.push(name as AwsService);
  }
  return out;
}

function versionOf(spec: VersionAsked, services: AwsService[]): string {
  const installed = services.map((s) => `${BACKENDS[s]} ${backendVersion(s)}`).join(', ');
  if (spec.version !== undefined && spec.version !== '' && spec.version !== 'latest') {
    throw new AtelierError(
      'UNSUPPORTED',
      `localstack ${spec.version} is not installed on this server: its localstack simulator is Atelier's own edge over ${installed}, ` +
        'which has no version to choose: leave the version out (or use "latest")',
      { field: 'version', requested: spec.version, installed },
    );
  }
  return installed;
}

/** One HTTP request over a unix socket; resolves with the status and body. */
function call(
  socketPath: string,
  opts: { method: string; path: string; headers: Record<string, string>; body?: string },
): Promise<{ status: number; body: string }> {
  try {
    assertSocket(socketPath);
  } catch (err) {
    return Promise.reject(err as Error);
  }
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method: opts.method, path: opts.path, headers: opts.headers, timeout: 2000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 2 s')));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** An Authorization header of SigV4's form for `service` (the edge routes by its scope and checks no signature). */
function sigv4(service: AwsService): string {
  const day = new Date().toISOString().slice(0, 10).replace(/-/g, '');
  return `AWS4-HMAC-SHA256 Credential=atelier/${day}/${REGION}/${service}/aws4_request, SignedHeaders=host;x-amz-date, Signature=${'0'.repeat(64)}`;
}

/** The cheapest real call of each service: ListBuckets, ListQueues, ListTables. */
async function listOnce(handle: SimulatorHandle, service: AwsService): Promise<void> {
  const host = `${handle.endpoint.host}:${handle.endpoint.port}`;
  const amzDate = `${new Date().toISOString().replace(/[-:]/g, '').slice(0, 15)}Z`;
  const common = { host, 'x-amz-date': amzDate, 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD', authorization: sigv4(service) };
  const res =
    service === 's3'
      ? await call(handle.socket, { method: 'GET', path: '/', headers: common })
      : await call(handle.socket, {
          method: 'POST',
          path: '/',
          headers: {
            ...common,
            'content-type': 'application/x-amz-json-1.0',
            'x-amz-target': service === 'sqs' ? 'AmazonSQS.ListQueues' : 'DynamoDB_20120810.ListTables',
          },
          body: '{}',
        });
  const ok =
    service === 's3'
      ? /<ListAllMyBucketsResult/.test(res.body)
      : service === 'sqs'
        ? res.body === '' || /^\{/.test(res.body)
        : /"TableNames"/.test(res.body);
  if (res.status !== 200 || !ok) throw new Error(`${service} list answered ${res.status}: ${res.body.slice(0, 200)}`);
}

function controlSocket(instance: { dir: string }): string {
  return join(instance.dir, 'run', 'control.sock');
}

export const localstack: CatalogEntry = {
  port: PORT,
  stopSignal: 'SIGTERM',
  // Any key is accepted, but a project may well set its real-looking test keys there.
  secretEnv: ['AWS_SECRET_ACCESS_KEY'],
  envKeys: ['SERVICES'],
  optionKeys: [],

  checkVersion(spec) {
    versionOf(spec, [...AWS_SERVICES]);
  },

  async prepare(spec, sockDir) {
    checkKeys(spec, localstack.envKeys, localstack.optionKeys);
    const services = servicesOf(spec);
    const version = versionOf(spec, services);
    checkSocketPath(join(sockDir, SOCKET));
    mkdirSync(spec.dir, { recursive: true, mode: 0o711 });
    chmodSync(spec.dir, 0o711);
    checkSocketPath(controlSocket(spec));
    // Fresh state at each start: objects on disk, the control socket's directory (the server's
    // and the simulator user's only).
    for (const sub of ['s3', 'run']) {
      rmSync(join(spec.dir, sub), { recursive: true, force: true });
      mkdirSync(join(spec.dir, sub), { mode: 0o700 });
      await chownTree(join(spec.dir, sub), spec.runAs);
    }
    const host = `${spec.name}.atelier.internal`;
    const endpoint = `http://${host}:${PORT}`;
    return {
      type: 'localstack',
      name: spec.name,
      version,
      dir: spec.dir,
      socketDir: spec.socketDir,
      socket: join(sockDir, SOCKET),
      socketName: `${spec.name}/${SOCKET}`,
      cacheDir: spec.cacheDir,
      runAs: spec.runAs,
      logFile: join(spec.dir, 'edge.log'),
      endpoint: { host, port: PORT },
      // What LocalStack's users set; the SDK v3 and the AWS CLI read AWS_ENDPOINT_URL. Any key is accepted.
      env: {
        AWS_ENDPOINT_URL: endpoint,
        AWS_ACCESS_KEY_ID: 'test',
        AWS_SECRET_ACCESS_KEY: 'test',
        AWS_REGION: REGION,
        AWS_DEFAULT_REGION: REGION,
      },
      settings: { services: services.join(','), region: REGION },
    };
  },

  command(instance): SimulatorProgram {
    const edge = edgeProgram();
    return {
      argv: [
        ...edge.argv,
        '--socket',
        `${SANDBOX_SOCKETS}/${SOCKET}`,
        '--control',
        `${SANDBOX_RUN}/control.sock`,
        '--s3-dir',
        SANDBOX_S3,
        '--services',
        instance.settings.services!,
        '--host',
        instance.endpoint.host,
        '--port',
        String(instance.endpoint.port),
        '--region',
        instance.settings.region!,
      ],
      mounts: [
        ...edge.mounts,
        { src: join(instance.dir, 's3'), dest: SANDBOX_S3, writable: true },
        { src: join(instance.dir, 'run'), dest: SANDBOX_RUN, writable: true },
      ],
    };
  },

  async probe(handle) {
    for (const service of handle.settings.services!.split(',') as AwsService[]) await listOnce(handle, service);
  },

  async initialise() {
    // Nothing to create: no bucket, queue or table is the initial state.
  },

  async resetInPlace(handle) {
    const path = controlSocket(handle);
    if (!existsSync(path))
      throw new AtelierError('UNAVAILABLE', `localstack simulator ${handle.name}: its control socket is gone`, { name: handle.name });
    const res = await call(path, { method: 'POST', path: '/reset', headers: {} });
    if (res.status !== 204) {
      throw new AtelierError(
        'UNAVAILABLE',
        `localstack simulator ${handle.name}: reset answered ${res.status}: ${res.body.slice(0, 200)}`,
        {
          name: handle.name,
        },
      );
    }
  },

  extraSocketDirs(instance) {
    return [join(instance.dir, 'run')];
  },

  async refresh(instance) {
    for (const sub of ['s3', 'run']) {
      rmSync(join(instance.dir, sub), { recursive: true, force: true });
      mkdirSync(join(instance.dir, sub), { mode: 0o700 });
      await chownTree(join(instance.dir, sub), instance.runAs);
    }
  },
};
