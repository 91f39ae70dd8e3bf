// The localstack simulator against the official AWS SDK v3 clients, unchanged but for their
// transport: an HTTP agent that dials the edge's unix socket, as the workshop's relay does for
// `aws.atelier.internal:4566`. Run as an unprivileged uid when the tests run as root.
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import {
  CreateTableCommand,
  DescribeTableCommand,
  DynamoDBClient,
  GetItemCommand,
  ListTablesCommand,
  PutItemCommand,
} from '@aws-sdk/client-dynamodb';
import {
  CreateBucketCommand,
  GetObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { CreateQueueCommand, ListQueuesCommand, ReceiveMessageCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { AtelierError } from '../src/core/index.js';
import { isAlive, removeSimulator, resetSimulator, simulatorLogs, startSimulator, type SimulatorHandle } from '../src/simulators/index.js';
import { tcpListeners, withChildren } from './helpers/proc.js';
import { assertSandboxed, processesMounting, RUN_AS, simulatorFixture } from './helpers/simulators.js';
import { simulatorSandboxArgv } from '../src/sandbox/index.js';

/** An agent whose every connection goes to `socketPath`, whatever host the URL names. */
function socketAgent(socketPath: string): Agent {
  const agent = new Agent({ keepAlive: true });
  (agent as unknown as { createConnection: () => Socket }).createConnection = () => connect(socketPath);
  return agent;
}

/** The three SDK clients, configured as a workshop's code would be from the handle's env. */
function clients(h: SimulatorHandle): { s3: S3Client; sqs: SQSClient; ddb: DynamoDBClient; agent: Agent } {
  const agent = socketAgent(h.socket);
  const common = {
    endpoint: h.env.AWS_ENDPOINT_URL!,
    region: h.env.AWS_REGION!,
    credentials: { accessKeyId: h.env.AWS_ACCESS_KEY_ID!, secretAccessKey: h.env.AWS_SECRET_ACCESS_KEY! },
    requestHandler: { httpAgent: agent },
  };
  return { s3: new S3Client({ ...common, forcePathStyle: true }), sqs: new SQSClient(common), ddb: new DynamoDBClient(common), agent };
}

describe('localstack simulator', () => {
  const sim = simulatorFixture('localstack');
  const { spec, start, handles } = sim;
  const agents: Agent[] = [];

  const sdk = (h: SimulatorHandle): ReturnType<typeof clients> => {
    const c = clients(h);
    agents.push(c.agent);
    return c;
  };

  after(() => {
    for (const a of agents) a.destroy();
  });

  it('serves S3, SQS and DynamoDB to the AWS SDK v3 through one edge socket, as the unprivileged uid, with no TCP port', async () => {
    const h = await start(spec('aws'));
    assert.deepEqual(h.endpoint, { host: 'aws.atelier.internal', port: 4566 });
    assert.equal(h.env.AWS_ENDPOINT_URL, 'http://aws.atelier.internal:4566');
    assert.equal(h.socketName, 'aws/edge.sock');
    assert.match(h.version, /s3rver 3\.7\.1, local-aws-sqs \d+\.\d+\.\d+, dynalite \d+\.\d+\.\d+/);
    const program = assertSandboxed(h);
    const pids = withChildren(program);
    assert.deepEqual(tcpListeners(pids), []);
    assert.equal(statSync(h.socket).mode & 0o777, 0o600);
    assert.equal(statSync(dirname(h.socket)).mode & 0o777, 0o700);
    if (RUN_AS) {
      for (const p of pids) assert.equal(Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))![1]), RUN_AS.uid);
    }
    const { s3, sqs, ddb } = sdk(h);

    // S3, path style: a buffer, a stream of unknown length (aws-chunked upload), list, get.
    await s3.send(new CreateBucketCommand({ Bucket: 'invoices' }));
    await s3.send(new PutObjectCommand({ Bucket: 'invoices', Key: 'a/1.json', Body: '{"total":42}', ContentType: 'application/json' }));
    const big = Buffer.alloc(200_000, 'x');
    await s3.send(
      new PutObjectCommand({
        Bucket: 'invoices',
        Key: 'a/2.bin',
        Body: Readable.from([big.subarray(0, 70_000), big.subarray(70_000)]),
        ContentLength: big.length,
      }),
    );
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: 'invoices', Prefix: 'a/' }));
    assert.deepEqual(
      listed.Contents?.map((o) => [o.Key, o.Size]),
      [
        ['a/1.json', 12],
        ['a/2.bin', 200_000],
      ],
    );
    const got = await s3.send(new GetObjectCommand({ Bucket: 'invoices', Key: 'a/1.json' }));
    assert.equal(await got.Body!.transformToString(), '{"total":42}');
    assert.equal(got.ContentType, 'application/json');
    const gotBig = await s3.send(new GetObjectCommand({ Bucket: 'invoices', Key: 'a/2.bin' }));
    assert.ok(Buffer.from(await gotBig.Body!.transformToByteArray()).equals(big));
    assert.deepEqual(
      (await s3.send(new ListBucketsCommand({}))).Buckets?.map((b) => b.Name),
      ['invoices'],
    );

    // SQS: the queue URL names the workshop's endpoint; send, receive.
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'orders' }));
    assert.equal(QueueUrl, 'http://aws.atelier.internal:4566/000000000000/orders');
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'order 7 placed' }));
    const received = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }));
    assert.deepEqual(
      received.Messages?.map((m) => m.Body),
      ['order 7 placed'],
    );

    // DynamoDB: a table is ACTIVE as soon as it is created, as CreateTable's answer says.
    const created = await ddb.send(
      new CreateTableCommand({
        TableName: 'users',
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
        AttributeDefinitions: [
          { AttributeName: 'id', AttributeType: 'S' },
          { AttributeName: 'email', AttributeType: 'S' },
        ],
        GlobalSecondaryIndexes: [
          { IndexName: 'by-email', KeySchema: [{ AttributeName: 'email', KeyType: 'HASH' }], Projection: { ProjectionType: 'ALL' } },
        ],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    );
    assert.equal(created.TableDescription?.TableStatus, 'ACTIVE');
    assert.deepEqual(
      created.TableDescription?.GlobalSecondaryIndexes?.map((i) => i.IndexStatus),
      ['ACTIVE'],
    );
    assert.equal((await ddb.send(new DescribeTableCommand({ TableName: 'users' }))).Table?.TableStatus, 'ACTIVE');
    await ddb.send(new PutItemCommand({ TableName: 'users', Item: { id: { S: 'u1' }, name: { S: 'Ada' } } }));
    const item = await ddb.send(new GetItemCommand({ TableName: 'users', Key: { id: { S: 'u1' } } }));
    assert.deepEqual(item.Item, { id: { S: 'u1' }, name: { S: 'Ada' } });

    // Every request went through the one edge, named in its log (written once each answer is sent).
    for (const line of [
      /s3 PUT \/invoices\/a\/2\.bin 200/,
      /sqs POST \/\S* AmazonSQS\.SendMessage 200/,
      /dynamodb POST \/ DynamoDB_20120810\.GetItem 200/,
    ]) {
      let log = '';
      for (let i = 0; i < 200 && !line.test(log); i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, 10));
        log = await simulatorLogs(h);
      }
      assert.match(log, line);
    }
  });

  it('runs only the services asked for, and says so to a client of another', async () => {
    const h = await start(spec('s3only', { services: ['s3', 'sqs'] }));
    assert.equal(h.settings.services, 's3,sqs');
    assert.doesNotMatch(h.version, /dynalite/);
    const { s3, sqs, ddb } = sdk(h);
    await s3.send(new CreateBucketCommand({ Bucket: 'bucket' }));
    assert.deepEqual((await sqs.send(new ListQueuesCommand({}))).QueueUrls ?? [], []);
    await assert.rejects(ddb.send(new ListTablesCommand({})), (err: Error & { $metadata?: { httpStatusCode?: number } }) => {
      assert.equal(err.$metadata?.httpStatusCode, 400);
      assert.match(err.message, /service "dynamodb" is not running in this simulator \(running: s3, sqs\)/);
      return true;
    });
  });

  it('reset empties buckets, queues and tables in place; a dead one is started again; remove leaves nothing', async () => {
    const h = await start(spec('state'));
    const { s3, sqs, ddb } = sdk(h);
    await s3.send(new CreateBucketCommand({ Bucket: 'keep-not' }));
    await s3.send(new PutObjectCommand({ Bucket: 'keep-not', Key: 'k', Body: 'v' }));
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'q' }));
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'm' }));
    await ddb.send(
      new CreateTableCommand({
        TableName: 'tbl',
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    );

    const same = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    assert.equal(same.pid, h.pid, 'emptied in place, not restarted');
    assert.deepEqual((await s3.send(new ListBucketsCommand({}))).Buckets ?? [], []);
    assert.deepEqual((await sqs.send(new ListQueuesCommand({}))).QueueUrls ?? [], []);
    assert.deepEqual((await ddb.send(new ListTablesCommand({}))).TableNames, []);
    // The same names can be used again at once.
    assert.equal((await sqs.send(new CreateQueueCommand({ QueueName: 'q' }))).QueueUrl, QueueUrl);
    assert.match(await simulatorLogs(h), /reset: buckets, queues and tables emptied/);

    process.kill(h.pid, 'SIGKILL');
    for (let i = 0; i < 200 && isAlive(h); i++) await new Promise((r) => setTimeout(r, 5));
    const again = await resetSimulator(h, { sandbox: simulatorSandboxArgv });
    handles.push(again);
    assert.notEqual(again.pid, h.pid);
    const fresh = sdk(again);
    assert.deepEqual((await fresh.s3.send(new ListBucketsCommand({}))).Buckets ?? [], []);
    assert.deepEqual((await fresh.sqs.send(new ListQueuesCommand({}))).QueueUrls ?? [], []);

    await removeSimulator(again);
    assert.equal(isAlive(again), false);
    assert.equal(existsSync(again.dir), false);
    assert.equal(existsSync(join(again.socketDir, again.name)), false);
    assert.deepEqual(processesMounting(again.dir), []);
  });

  it('refuses a name in use, answers an unsigned S3 request, and maps virtual-hosted buckets to path style', async () => {
    const h = await start(spec('edge', { services: ['s3'] }));
    await assert.rejects(start(spec('edge')), (err: AtelierError) => err.code === 'ALREADY_EXISTS');
    await sdk(h).s3.send(new CreateBucketCommand({ Bucket: 'site' }));
    await sdk(h).s3.send(new PutObjectCommand({ Bucket: 'site', Key: 'index.html', Body: '<h1>hi</h1>' }));
    const get = (path: string, host: string): Promise<{ status: number; body: string }> =>
      new Promise((resolve, reject) => {
        request({ socketPath: h.socket, path, headers: { host } }, (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        })
          .on('error', reject)
          .end();
      });
    assert.deepEqual(await get('/site/index.html', 'aws.atelier.internal:4566'), { status: 200, body: '<h1>hi</h1>' });
    assert.deepEqual(await get('/index.html', 'site.edge.atelier.internal:4566'), { status: 200, body: '<h1>hi</h1>' });
  });

  it('keeps every object inside its own directory, whatever the key says', async () => {
    // A directory the simulator's uid could write to, outside the simulator's own.
    const victim = join(sim.base, 'victim');
    mkdirSync(victim, { mode: 0o777 });
    chmodSync(victim, 0o777);
    const h = await start(spec('confined', { services: ['s3'] }));
    const { s3 } = sdk(h);
    await s3.send(new CreateBucketCommand({ Bucket: 'bkt' }));
    // s3/bkt/<key>: four levels up from the bucket is `base`.
    const raw = (method: string, path: string, headers: Record<string, string> = {}): Promise<number> =>
      new Promise((resolve, reject) => {
        request({ socketPath: h.socket, method, path, headers: { host: 'aws.atelier.internal:4566', ...headers } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        })
          .on('error', reject)
          .end(method === 'PUT' ? 'payload' : undefined);
      });
    await raw('PUT', `/bkt/${encodeURIComponent('../../../../victim/pwn')}`);
    await s3.send(new PutObjectCommand({ Bucket: 'bkt', Key: '../../../../victim/sdk', Body: 'x' })).catch(() => undefined);
    await raw('PUT', '/bkt/dest', { 'x-amz-copy-source': `/bkt/${encodeURIComponent('../../../../victim/pwn')}` });
    await raw('PUT', `/bkt/k?partNumber=1&uploadId=${encodeURIComponent('../../../../../victim/up')}`);
    assert.deepEqual(readdirSync(victim), []);
  });

  it('refuses unknown services, versions, settings and fields of other types', async () => {
    await assert.rejects(startSimulator(spec('bad', { services: ['s3', 'sns'] })), (err: AtelierError) => {
      assert.equal(err.code, 'INVALID_ARGUMENT');
      assert.match(err.message, /unknown service "sns" in services: this simulator runs s3, sqs, dynamodb/);
      return true;
    });
    await assert.rejects(startSimulator(spec('bad', { services: [] })), /services must be a non-empty list/);
    await assert.rejects(startSimulator(spec('bad', { env: { SERVICES: 's3,kinesis' } })), /unknown service "kinesis" in env\.SERVICES/);
    await assert.rejects(startSimulator(spec('bad', { env: { DEBUG: '1' } })), /unknown env DEBUG \(known: SERVICES\)/);
    await assert.rejects(startSimulator(spec('bad', { version: '3.0' })), (err: AtelierError) => {
      assert.equal(err.code, 'UNSUPPORTED');
      assert.match(err.message, /localstack 3\.0 is not installed on this server: .*s3rver 3\.7\.1.*leave the version out/);
      return true;
    });
    await assert.rejects(
      startSimulator({ ...spec('bad'), type: 'redis', services: ['s3'] }),
      /services applies to localstack simulators only/,
    );
    await assert.rejects(
      startSimulator({ ...spec('bad'), type: 'nosuch' as 'redis' }),
      /unknown simulator type "nosuch": known types are postgres, redis, localstack, wiremock/,
    );
    assert.equal(existsSync(join(sim.base, 'services', 'bad')), false);
  });
});
