/**
 * The process of a `localstack` simulator: one HTTP edge, like LocalStack's port 4566, in front
 * of S3 (`s3rver`), SQS (`local-aws-sqs`) and DynamoDB (`dynalite`), all in this one process.
 *
 * Started by the server (catalog/localstack.ts) in the simulator's sandbox, with (inside paths):
 *   --socket PATH    the unix socket the workshop's relay dials (nothing listens on TCP)
 *   --control PATH   a unix socket for the server only (its directory is closed to the workshop): POST /reset
 *   --s3-dir DIR     where S3 objects are kept (emptied by a reset)
 *   --services LIST  comma-separated subset of s3,sqs,dynamodb
 *   --host H --port P --region R   what queue URLs and ARNs name (the workshop's view of the edge)
 *
 * Routing: the service of a request is the one its SigV4 credential scope names (the
 * Authorization header, or X-Amz-Credential for a presigned URL), else its X-Amz-Target
 * header (DynamoDB_20120810.*, AmazonSQS.*); anything unsigned and untargeted is S3 (anonymous
 * S3 requests, SigV2). Any access key is accepted, as LocalStack does.
 */
import { chmodSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { Transform, type TransformCallback } from 'node:stream';
import { parseArgs } from 'node:util';
import { AWS_SERVICES, type AwsService } from './types.js';

const require = createRequire(import.meta.url);

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

interface S3rverApp {
  callback(): Handler;
  reset(): void;
}
interface S3Account {
  createKeyPair(accessKeyId: string, secret: string): void;
}
interface AccountModule {
  registry: Map<string, S3Account>;
  DUMMY_ACCOUNT: S3Account;
}
type Dynalite = (options: Record<string, unknown>) => Server & { close(cb?: (err?: Error) => void): void };
type SqsFactory = (options: Record<string, unknown>) => { requestHandler: (req: IncomingMessage, res: ServerResponse) => Promise<void> };

const { values: args } = parseArgs({
  options: {
    socket: { type: 'string' },
    control: { type: 'string' },
    's3-dir': { type: 'string' },
    services: { type: 'string' },
    host: { type: 'string' },
    port: { type: 'string' },
    region: { type: 'string' },
  },
  strict: true,
});
for (const key of ['socket', 'control', 's3-dir', 'services', 'host', 'port', 'region'] as const) {
  if (!args[key]) {
    process.stderr.write(`aws edge: --${key} is required\n`);
    process.exit(2);
  }
}
const services = new Set(args.services!.split(',') as AwsService[]);
const publicHost = args.host!;
const publicPort = Number(args.port);
const region = args.region!;

function log(line: string): void {
  process.stdout.write(`${new Date().toISOString()} ${line}\n`);
}

// ---------------------------------------------------------------------------------------------
// Backends, each behind a handler the edge calls in-process. A reset makes each one anew.

let s3: S3rverApp | undefined;
/** s3rver's Koa handler, made once (callback() composes the middleware anew at each call). */
let s3Handler: Handler | undefined;
let sqs: Handler | undefined;
let dynamodb: Handler | undefined;

/** s3rver knows one access key (S3RVER): every key a client signs with joins its account. */
const s3Accounts = require('s3rver/lib/models/account.js') as AccountModule;
const MAX_KEYS = 1000;

function makeS3(): S3rverApp {
  const S3rver = require('s3rver') as new (options: Record<string, unknown>) => S3rverApp;
  // serviceEndpoint is our host: s3rver's own virtual-host matching then never fires, and the
  // edge maps `<bucket>.<host>` to path style itself.
  return new S3rver({ directory: args['s3-dir'], silent: true, serviceEndpoint: publicHost, vhostBuckets: false });
}

function makeSqs(): Handler {
  const { createRequestHandler } = require('local-aws-sqs') as { createRequestHandler: SqsFactory };
  const { requestHandler } = createRequestHandler({
    port: publicPort,
    hostname: publicHost,
    region,
    accountId: '000000000000',
    // A queue deleted by the agent (or by a reset) may be created again at once.
    emulateQueueCreationLifecycle: false,
  });
  return (req, res) => {
    requestHandler(req, res).catch((err: unknown) => fail(res, err));
  };
}

/** dynalite's own CRC32 (DynamoDB clients check `x-amz-crc32` against the body), reached through it. */
const crc32 = createRequire(require.resolve('dynalite'))('buffer-crc32') as { unsigned(body: string): number };

interface TableDescription {
  TableStatus?: string;
  GlobalSecondaryIndexes?: { IndexStatus?: string }[];
}

/**
 * Tables are ACTIVE at once, in CreateTable's own answer too. dynalite stores a new table as
 * CREATING, answers so, and marks it ACTIVE on a timer (`createTableMs`, 0 here): its answer is
 * held until that timer has run (a timer set after it runs after it), then said as ACTIVE. A
 * client that acts on the answer (PutItem at once, as a script does) finds the table usable.
 */
function activeAtOnce(res: ServerResponse): void {
  const end = res.end.bind(res) as (body?: string) => ServerResponse;
  res.end = ((body?: unknown) => {
    let text = typeof body === 'string' ? body : Buffer.isBuffer(body) ? body.toString('utf8') : undefined;
    if (res.statusCode === 200 && text !== undefined) {
      try {
        const answer = JSON.parse(text) as { TableDescription?: TableDescription };
        const table = answer.TableDescription;
        if (table?.TableStatus === 'CREATING') {
          table.TableStatus = 'ACTIVE';
          for (const index of table.GlobalSecondaryIndexes ?? []) if (index.IndexStatus === 'CREATING') index.IndexStatus = 'ACTIVE';
          text = JSON.stringify(answer);
          res.setHeader('x-amz-crc32', crc32.unsigned(text));
          res.setHeader('Content-Length', Buffer.byteLength(text));
        }
      } catch {
        // Not JSON: sent as dynalite wrote it.
      }
    }
    setTimeout(() => end(text), 0);
    return res;
  }) as ServerResponse['end'];
}

function makeDynamo(): Handler {
  const dynalite = require('dynalite') as Dynalite;
  // No table waits in CREATING or DELETING (dynalite's default is 500 ms); in memory.
  // The server is never listened on: the edge calls its request handler.
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  const handler = server.listeners('request')[0] as Handler;
  return (req, res) => {
    if (req.headers['x-amz-target'] === 'DynamoDB_20120810.CreateTable') activeAtOnce(res);
    handler(req, res);
  };
}

function start(): void {
  if (services.has('s3')) {
    s3 = makeS3();
    s3Handler = s3.callback();
  }
  if (services.has('sqs')) sqs = makeSqs();
  if (services.has('dynamodb')) dynamodb = makeDynamo();
}

function reset(): void {
  // s3rver's reset removes every bucket directory; queues and tables live in memory and go with
  // the backend replaced.
  s3?.reset();
  if (sqs) sqs = makeSqs();
  if (dynamodb) dynamodb = makeDynamo();
}

// ---------------------------------------------------------------------------------------------
// Routing.

const CREDENTIAL = /Credential=([^/,\s]+)\/\d{8}\/[^/,\s]+\/([a-z0-9-]+)\/aws4_request/;

/** The service a request is for, and the access key it was signed with. */
function route(req: IncomingMessage, url: URL): { service: string; accessKey?: string | undefined } {
  const auth = req.headers.authorization;
  const fromHeader = typeof auth === 'string' ? CREDENTIAL.exec(auth) : null;
  if (fromHeader) return { service: fromHeader[2]!, accessKey: fromHeader[1] };
  const credential = url.searchParams.get('X-Amz-Credential')?.split('/');
  if (credential && credential.length === 5) return { service: credential[3]!, accessKey: credential[0] };
  const target = req.headers['x-amz-target'];
  if (typeof target === 'string') {
    if (target.startsWith('DynamoDB_')) return { service: 'dynamodb' };
    if (target.startsWith('AmazonSQS.')) return { service: 'sqs' };
  }
  const v2 = typeof auth === 'string' ? /^AWS ([^:]+):/.exec(auth) : null;
  return { service: 's3', accessKey: v2?.[1] ?? url.searchParams.get('AWSAccessKeyId') ?? undefined };
}

function fail(res: ServerResponse, err: unknown): void {
  log(`error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(500, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ __type: 'InternalFailure', message: 'the simulator failed on this request: see its log' }));
}

function refuse(res: ServerResponse, service: string): void {
  const running = [...services].join(', ');
  const message =
    `service ${JSON.stringify(service)} is not running in this simulator (running: ${running}); ` +
    `declare it in the simulator's services (${AWS_SERVICES.join(', ')})`;
  res.writeHead(400, { 'content-type': 'application/json', 'x-amzn-errortype': 'ServiceNotRunning' });
  res.end(JSON.stringify({ __type: 'ServiceNotRunning', message }));
}

/**
 * Decodes an `aws-chunked` body (what SDK v3 sends for uploads with a trailing checksum, and
 * for SigV4 streaming uploads), which s3rver 3 would store as it came: chunk sizes, signatures
 * and trailers included.
 */
class AwsChunkedDecoder extends Transform {
  private buf: Buffer = Buffer.alloc(0);
  private left = 0;
  private done = false;

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    try {
      this.drain();
      cb();
    } catch (err) {
      cb(err as Error);
    }
  }

  override _flush(cb: TransformCallback): void {
    cb(this.done || this.left > 0 ? null : new Error('aws-chunked body ended before its last chunk'));
  }

  private drain(): void {
    while (!this.done) {
      if (this.left > 0) {
        if (this.buf.length === 0) return;
        const n = Math.min(this.left, this.buf.length);
        this.push(this.buf.subarray(0, n));
        this.buf = this.buf.subarray(n);
        this.left -= n;
        // Each chunk's data is followed by CRLF, consumed before the next size line.
        if (this.left === 0) this.left = -2;
        continue;
      }
      if (this.left === -2) {
        if (this.buf.length < 2) return;
        this.buf = this.buf.subarray(2);
        this.left = 0;
        continue;
      }
      const eol = this.buf.indexOf('\r\n');
      if (eol < 0) {
        if (this.buf.length > 4096) throw new Error('aws-chunked size line too long');
        return;
      }
      const size = Number.parseInt(this.buf.subarray(0, eol).toString('latin1').split(';')[0]!, 16);
      if (!Number.isFinite(size) || size < 0) throw new Error('malformed aws-chunked size line');
      this.buf = this.buf.subarray(eol + 2);
      if (size === 0) {
        // Trailers (x-amz-checksum-…) and the final CRLF follow: nothing of them is data.
        this.done = true;
        return;
      }
      this.left = size;
    }
  }
}

/** An S3 request as s3rver 3 understands it: path style, plain body. */
function adaptS3(req: IncomingMessage, url: URL): IncomingMessage {
  const host = (req.headers.host ?? '').replace(/:\d+$/, '');
  if (host.endsWith(`.${publicHost}`)) {
    // Virtual-hosted style (`bucket.aws.atelier.internal`): made path style.
    const bucket = host.slice(0, -publicHost.length - 1);
    req.url = `/${bucket}${url.pathname === '/' ? '' : url.pathname}${url.search}`;
    req.headers.host = `${publicHost}:${publicPort}`;
  }
  const encoding = req.headers['content-encoding'];
  const sha = req.headers['x-amz-content-sha256'];
  const chunked =
    (typeof encoding === 'string' && encoding.split(',').some((e) => e.trim() === 'aws-chunked')) ||
    (typeof sha === 'string' && sha.startsWith('STREAMING-'));
  if (!chunked) return req;
  const decoded = req.headers['x-amz-decoded-content-length'];
  const rest =
    typeof encoding === 'string'
      ? encoding
          .split(',')
          .map((e) => e.trim())
          .filter((e) => e !== 'aws-chunked' && e !== '')
      : [];
  if (rest.length > 0) req.headers['content-encoding'] = rest.join(', ');
  else delete req.headers['content-encoding'];
  delete req.headers['transfer-encoding'];
  if (typeof decoded === 'string') req.headers['content-length'] = decoded;
  req.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
  // s3rver reads the body from `req` as a stream: hand it the decoded one, with req's fields.
  const body = req.pipe(new AwsChunkedDecoder());
  req.on('error', (err) => body.destroy(err));
  return Object.assign(body, {
    headers: req.headers,
    rawHeaders: req.rawHeaders,
    method: req.method,
    url: req.url,
    httpVersion: req.httpVersion,
    httpVersionMajor: req.httpVersionMajor,
    httpVersionMinor: req.httpVersionMinor,
    socket: req.socket,
    connection: req.socket,
    complete: false,
    aborted: false,
  }) as unknown as IncomingMessage;
}

function edge(req: IncomingMessage, res: ServerResponse): void {
  const t0 = performance.now();
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'http://edge');
  } catch {
    res.writeHead(400).end();
    return;
  }
  const { service, accessKey } = route(req, url);
  res.once('finish', () => {
    const target = req.headers['x-amz-target'];
    log(
      `${service} ${req.method} ${url.pathname}${typeof target === 'string' ? ` ${target}` : ''} ${res.statusCode} ${(performance.now() - t0).toFixed(0)}ms`,
    );
  });
  try {
    if (service === 's3' && s3Handler) {
      if (accessKey && !s3Accounts.registry.has(accessKey) && s3Accounts.registry.size < MAX_KEYS) {
        s3Accounts.DUMMY_ACCOUNT.createKeyPair(accessKey, accessKey);
      }
      s3Handler(adaptS3(req, url), res);
    } else if (service === 'sqs' && sqs) sqs(req, res);
    else if (service === 'dynamodb' && dynamodb) dynamodb(req, res);
    else {
      req.resume();
      refuse(res, service);
    }
  } catch (err) {
    fail(res, err);
  }
}

// ---------------------------------------------------------------------------------------------

function listen(server: Server, path: string, mode: number): Promise<void> {
  rmSync(path, { force: true });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      chmodSync(path, mode);
      resolve();
    });
  });
}

start();
const edgeServer = createServer(edge);
// Long polls (SQS WaitTimeSeconds up to 20 s) must not be cut.
edgeServer.requestTimeout = 0;
const control = createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/reset') {
    try {
      reset();
      log('reset: buckets, queues and tables emptied');
      res.writeHead(204).end();
    } catch (err) {
      fail(res, err);
    }
    return;
  }
  res.writeHead(404).end();
});

// Its owner only: the server's relay dials it (as root, or as this same user when rootless); its
// host directory is 0700 too, and no other workshop's sandbox has that path.
await listen(edgeServer, args.socket!, 0o600);
await listen(control, args.control!, 0o600);
log(`aws edge listening on ${args.socket} for ${[...services].join(', ')} (as http://${publicHost}:${publicPort})`);

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping`);
    edgeServer.close();
    control.close();
    edgeServer.closeAllConnections();
    process.exit(0);
  });
}
