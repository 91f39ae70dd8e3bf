import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { TestServer, makeRepo } from './helpers/server.js';

// Debian 12's own AWS CLI (apt `awscli`, 2.9: it reads neither AWS_ENDPOINT_URL nor endpoint_url
// in the config file) in a real workshop, against a localstack simulator requested live: it
// reaches the simulator (the `aws` wrapper and the config files under /run/atelier/aws), never
// real AWS (nothing in the workshop's egress log or approvals names amazonaws.com), and the
// environment has no doubled AWS_AWS_* variables.

const AWS_CLI = '/usr/bin/aws';

describe('the system AWS CLI in a workshop with a localstack simulator', () => {
  let server: TestServer;
  let ws: string;

  before(async () => {
    // Never skipped: a machine without it has not run scripts/install.sh.
    assert.ok(existsSync(AWS_CLI), `${AWS_CLI} is not installed: run scripts/install.sh (it installs awscli)`);
    server = await TestServer.start();
    const w = await server.createWorkshop({ repo: makeRepo(), name: 'awscli' });
    assert.equal(w.status, 'Running', w.statusReason ?? '');
    ws = w.id;
  });

  after(async () => {
    await server?.dispose();
  });

  /** Runs a shell line in the workshop; one attempt per call and bounded waits, so a call to real AWS fails fast. */
  const sh = (line: string): Promise<{ exitCode: number; stdout: string; stderr: string }> =>
    server.exec(ws, ['/bin/sh', '-c', line], { env: { AWS_MAX_ATTEMPTS: '1', AWS_PAGER: '' } });

  it('has no AWS configuration before a localstack simulator is requested', async () => {
    const r = await sh('env | grep "^AWS_" ; ls /run/atelier/aws 2>&1; command -v aws');
    assert.doesNotMatch(r.stdout, /^AWS_(CONFIG_FILE|SHARED_CREDENTIALS_FILE|ENDPOINT_URL)=/m, r.stdout);
    assert.match(r.stdout, /No such file or directory/);
    assert.match(r.stdout, new RegExp(`^${AWS_CLI}$`, 'm'), 'the system CLI, not a wrapper');
    const login = await sh(`bash -lc 'command -v aws'`);
    assert.equal(login.stdout, `${AWS_CLI}\n`, login.stderr);
  });

  it('aws s3, sqs and dynamodb reach the simulator, never real AWS, with no AWS_AWS_* variable', async () => {
    const req = await server.api<{ name: string; status: string; statusReason: string | null }>('POST', `/v1/workshops/${ws}/simulators`, {
      type: 'localstack',
    });
    assert.equal(req.status, 201, JSON.stringify(req.body));
    assert.equal(req.body.name, 'aws');
    assert.equal(req.body.status, 'Running', req.body.statusReason ?? '');

    const version = await sh('aws --version');
    assert.equal(version.exitCode, 0, version.stderr);
    assert.match(version.stdout, /^aws-cli\/2\.(\d|1[0-2])\./, 'a CLI before 2.13, which ignores AWS_ENDPOINT_URL');

    const s3 = await sh('aws s3 mb s3://reports --cli-read-timeout 20 && aws s3 ls --cli-read-timeout 20');
    assert.equal(s3.exitCode, 0, s3.stderr);
    assert.match(s3.stdout, /make_bucket: reports/);
    assert.match(s3.stdout, /^\S+ \S+ reports$/m);
    const sqs = await sh('aws sqs create-queue --queue-name jobs --output text --cli-read-timeout 20');
    assert.equal(sqs.exitCode, 0, sqs.stderr);
    assert.equal(sqs.stdout.trim(), 'http://aws.atelier.internal:4566/000000000000/jobs');
    const ddb = await sh('aws dynamodb list-tables --output json --cli-read-timeout 20');
    assert.equal(ddb.exitCode, 0, ddb.stderr);
    assert.deepEqual(JSON.parse(ddb.stdout), { TableNames: [] });
    // A caller's own --endpoint-url wins (here one that answers nothing).
    const own = await sh('aws --endpoint-url http://127.0.0.1:9 s3 ls --cli-connect-timeout 5');
    assert.notEqual(own.exitCode, 0);
    assert.match(own.stderr, /127\.0\.0\.1:9/);

    const env = await sh('env');
    assert.deepEqual(env.stdout.match(/^AWS_AWS_\w*/gm), null, env.stdout);
    assert.match(env.stdout, /^AWS_CONFIG_FILE=\/run\/atelier\/aws\/config$/m);
    assert.match(env.stdout, /^AWS_SHARED_CREDENTIALS_FILE=\/run\/atelier\/aws\/credentials$/m);
    const config = await sh('cat "$AWS_CONFIG_FILE"; echo x >> "$AWS_CONFIG_FILE" || echo read-only');
    assert.match(config.stdout, /^endpoint_url = http:\/\/aws\.atelier\.internal:4566$/m);
    assert.match(config.stdout, /^read-only$/m);

    const log = await server.api<{ items: Array<{ host: string }> }>('GET', `/v1/workshops/${ws}/egress`);
    assert.equal(log.status, 200);
    assert.deepEqual(
      log.body.items.filter((d) => /amazonaws\.com/.test(d.host)),
      [],
    );
    const approvals = await server.api<{ items: unknown[] }>('GET', `/v1/approvals?workshop=${ws}`);
    assert.equal(approvals.status, 200);
    assert.doesNotMatch(JSON.stringify(approvals.body.items), /amazonaws/);
  });

  it('a login shell (bash -l, as ssh, terminals and agent sessions start) finds the wrapper too, and reaches the simulator', async () => {
    const path = await sh(`bash -lc 'echo "$PATH"; command -v aws'`);
    assert.equal(path.exitCode, 0, path.stderr);
    assert.match(path.stdout, /^\/run\/atelier\/aws\/bin:/, 'the wrapper first, after /etc/profile reset the PATH');
    assert.match(path.stdout, /^\/run\/atelier\/aws\/bin\/aws$/m);
    const s3 = await sh(`bash -lc 'aws s3 mb s3://from-login --cli-read-timeout 20 && aws s3 ls --cli-read-timeout 20'`);
    assert.equal(s3.exitCode, 0, s3.stderr);
    assert.match(s3.stdout, /^\S+ \S+ from-login$/m);
    // Sourced twice (a nested login shell), it is not put on the PATH twice.
    const twice = await sh(`bash -lc "bash -lc 'echo \\$PATH'"`);
    assert.equal(twice.stdout.split('/run/atelier/aws/bin').length, 2, twice.stdout);
    // The snippet is the server's: the workshop cannot change what its login shells source.
    const write = await sh(
      'echo "echo owned" > /run/atelier/profile.d/x.sh || echo read-only; echo x >> /etc/profile.d/zz-atelier.sh || echo read-only',
    );
    assert.equal(write.stdout, 'read-only\nread-only\n', write.stdout + write.stderr);
    const log = await server.api<{ items: Array<{ host: string }> }>('GET', `/v1/workshops/${ws}/egress`);
    assert.deepEqual(
      log.body.items.filter((d) => /amazonaws\.com/.test(d.host)),
      [],
    );
  });
});
