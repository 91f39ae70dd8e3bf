import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { build } from 'esbuild';
import { TestServer, makeRepo } from './helpers/server.js';

// The AWS-style and WireMock simulators from inside a real workshop, declared in atelier.yaml:
// the official AWS SDK v3 (bundled into the workspace as a project would ship it, configured only
// by the environment the workshop gets) against aws.atelier.internal:4566, and curl against a
// WireMock stub loaded from the repository. A declaration that cannot be honoured (a stubs
// directory outside the repository, an unknown type) leaves the workshop running and says why.

const AWS_SCRIPT = `
const { S3Client, CreateBucketCommand, PutObjectCommand, GetObjectCommand, ListObjectsV2Command } = require('@aws-sdk/client-s3');
const { SQSClient, CreateQueueCommand, SendMessageCommand, ReceiveMessageCommand } = require('@aws-sdk/client-sqs');
const { DynamoDBClient, CreateTableCommand, PutItemCommand, GetItemCommand } = require('@aws-sdk/client-dynamodb');
(async () => {
  const out = {};
  const s3 = new S3Client({ forcePathStyle: true });
  await s3.send(new CreateBucketCommand({ Bucket: 'reports' }));
  await s3.send(new PutObjectCommand({ Bucket: 'reports', Key: 'a/b.txt', Body: 'hello s3' }));
  out.get = await (await s3.send(new GetObjectCommand({ Bucket: 'reports', Key: 'a/b.txt' }))).Body.transformToString();
  out.list = ((await s3.send(new ListObjectsV2Command({ Bucket: 'reports' }))).Contents || []).map((o) => o.Key);
  const sqs = new SQSClient({});
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: 'jobs' }));
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: 'job-1' }));
  out.received = ((await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }))).Messages || []).map((m) => m.Body);
  const ddb = new DynamoDBClient({});
  await ddb.send(new CreateTableCommand({
    TableName: 'users',
    KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
    AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
    BillingMode: 'PAY_PER_REQUEST',
  }));
  await ddb.send(new PutItemCommand({ TableName: 'users', Item: { id: { S: 'u1' }, name: { S: 'Ada' } } }));
  out.item = (await ddb.send(new GetItemCommand({ TableName: 'users', Key: { id: { S: 'u1' } } }))).Item.name.S;
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e.name + ': ' + e.message); process.exit(1); });
`;

describe('AWS-style and WireMock simulators in a workshop', () => {
  let server: TestServer;
  let ws: string;

  before(async () => {
    server = await TestServer.start();
    const repo = makeRepo({
      'atelier.yaml': [
        'simulators:',
        '  - name: localstack',
        '    services: ["s3", "sqs", "dynamodb"]',
        '  - name: wiremock',
        '    stubsDirectory: ./tests/mocks',
        '  - type: wiremock',
        '    name: outside',
        '    stubsDirectory: ../',
        '',
      ].join('\n'),
      'tests/mocks/mappings/hello.json': JSON.stringify({
        request: { method: 'GET', url: '/hello' },
        response: { status: 200, body: 'hello from a stub', headers: { 'Content-Type': 'text/plain' } },
      }),
    });
    const w = await server.createWorkshop({ repo, name: 'catalog' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
  });

  after(async () => {
    await server?.dispose();
  });

  // (A type this server does not run fails the whole workshop instead, up front: cli.create.test.ts.)
  it('starts what can start and says why the others failed, the workshop running', async () => {
    const r = await server.api<{ items: Array<{ name: string; status: string; statusReason: string | null; endpoint: unknown }> }>(
      'GET',
      `/v1/workshops/${ws}/simulators`,
    );
    const by = Object.fromEntries(r.body.items.map((s) => [s.name, s]));
    assert.equal(by.aws?.status, 'Running', JSON.stringify(by.aws));
    assert.deepEqual(by.aws?.endpoint, { host: 'aws.atelier.internal', port: 4566 });
    assert.equal(by.mock?.status, 'Running', JSON.stringify(by.mock));
    assert.deepEqual(by.mock?.endpoint, { host: 'mock.atelier.internal', port: 8080 });
    assert.equal(by.outside?.status, 'Failed');
    assert.match(by.outside?.statusReason ?? '', /stubsDirectory "\.\.\/" points outside the repository/);
  });

  it('curl reaches a WireMock stub from the repository, and the admin API answers', async () => {
    const r = await server.exec(ws, [
      'sh',
      '-c',
      'curl -sf "$WIREMOCK_URL/hello" && curl -sf http://mock.atelier.internal:8080/__admin/mappings',
    ]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /^hello from a stub/);
    assert.match(r.stdout, /"url" ?: ?"\/hello"/);
    const miss = await server.exec(ws, ['sh', '-c', 'curl -s -o /dev/null -w "%{http_code}" http://mock.atelier.internal:8080/nothing']);
    assert.equal(miss.stdout, '404');
  });

  it('the AWS SDK v3, configured by the environment only, uses S3, SQS and DynamoDB at aws.atelier.internal:4566', async () => {
    const bundle = await build({
      stdin: { contents: AWS_SCRIPT, resolveDir: process.cwd(), loader: 'js' },
      bundle: true,
      platform: 'node',
      format: 'cjs',
      write: false,
      logLevel: 'silent',
    });
    const put = await server.api('PUT', `/v1/workshops/${ws}/files?path=aws.cjs`, Buffer.from(bundle.outputFiles[0]!.contents));
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const env = await server.exec(ws, ['sh', '-c', 'echo "$AWS_ENDPOINT_URL"']);
    assert.equal(env.stdout.trim(), 'http://aws.atelier.internal:4566');
    const r = await server.exec(ws, ['node', 'aws.cjs']);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), { get: 'hello s3', list: ['a/b.txt'], received: ['job-1'], item: 'Ada' });
    // Reset empties the buckets, queues and tables.
    assert.equal((await server.api('POST', `/v1/workshops/${ws}/simulators/aws/reset`)).status, 200);
    const again = await server.exec(ws, ['node', 'aws.cjs']);
    assert.equal(again.exitCode, 0, again.stderr);
  });
});
