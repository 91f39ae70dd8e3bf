import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from '../core/index.js';
import { LOGIN_PROFILE_SUBDIR } from '../sandbox/index.js';

/**
 * A workshop's AWS configuration, for the SDKs and CLIs that ignore AWS_ENDPOINT_URL: files in
 * the server-owned directory seen read-only at /run/atelier inside (the workshop cannot replace
 * them, nor plant a link the server would follow), present only while a localstack simulator runs.
 */
const DIR = 'aws';
/** Where the workshop sees them. */
export const AWS_DIR_INSIDE = `/run/atelier/${DIR}`;
export const AWS_BIN_INSIDE = `${AWS_DIR_INSIDE}/bin`;

/**
 * `aws` for CLIs before 2.13 (Debian 12 ships 2.9), which read neither AWS_ENDPOINT_URL nor
 * `endpoint_url` in the config file: it runs the next `aws` on the PATH with `--endpoint-url
 * "$AWS_ENDPOINT_URL"`, unless the caller gave one or unset the variable.
 */
const WRAPPER = `#!/bin/sh
# Written by Atelier (docs/simulators.md, "The AWS CLI and SDKs"): gives the AWS CLI the
# workshop's localstack simulator as --endpoint-url, which CLIs before 2.13 need.
self=${AWS_BIN_INSIDE}
real=
set -f
IFS=:
for d in $PATH; do
  # Not this file again, by whatever directory or link it is reached.
  if [ -n "$d" ] && [ -f "$d/aws" ] && [ -x "$d/aws" ] && ! [ "$d/aws" -ef "$self/aws" ]; then real=$d/aws; break; fi
done
unset IFS
set +f
if [ -z "$real" ]; then
  echo "aws: command not found (no AWS CLI is installed on this host: see docs/simulators.md)" >&2
  exit 127
fi
if [ -n "\${AWS_ENDPOINT_URL:-}" ]; then
  for a in "$@"; do
    case $a in --endpoint-url | --endpoint-url=*) exec "$real" "$@" ;; esac
  done
  exec "$real" --endpoint-url "$AWS_ENDPOINT_URL" "$@"
fi
exec "$real" "$@"
`;

const PROFILE = `# Written by Atelier: the AWS CLI wrapper first on the PATH, as in execs.
case ":$PATH:" in *":${AWS_BIN_INSIDE}:"*) ;; *) PATH="${AWS_BIN_INSIDE}:$PATH"; export PATH ;; esac
`;

/** What the files say: the first running localstack simulator's endpoint, region and keys. */
export interface AwsEndpoint {
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
}

/**
 * Writes (or, with no endpoint, removes) the workshop's AWS files under its run directory and
 * returns the variables that name them for execs.
 */
export function writeAwsConfig(runDir: string, aws: AwsEndpoint | undefined): Record<string, string> {
  const dir = join(runDir, DIR);
  // Login shells reset PATH (/etc/profile): this snippet, sourced by the sandbox's own
  // /etc/profile.d, puts the wrapper first again.
  const profile = join(runDir, LOGIN_PROFILE_SUBDIR, 'aws.sh');
  if (!aws) {
    rmSync(dir, { recursive: true, force: true });
    rmSync(profile, { force: true });
    return {};
  }
  mkdirSync(join(dir, 'bin'), { recursive: true, mode: 0o755 });
  // Path-style S3: `<bucket>.aws.atelier.internal` has no address inside the workshop.
  const config =
    `# Written by Atelier for the workshop's localstack simulator (docs/simulators.md).\n` +
    `[default]\nregion = ${aws.region}\nendpoint_url = ${aws.endpoint}\ns3 =\n  addressing_style = path\n`;
  const credentials = `[default]\naws_access_key_id = ${aws.accessKeyId}\naws_secret_access_key = ${aws.secretAccessKey}\n`;
  writeFileAtomic(join(dir, 'config'), config, 0o644);
  writeFileAtomic(join(dir, 'credentials'), credentials, 0o644);
  writeFileAtomic(join(dir, 'bin', 'aws'), WRAPPER, 0o755);
  mkdirSync(join(runDir, LOGIN_PROFILE_SUBDIR), { recursive: true, mode: 0o755 });
  writeFileAtomic(profile, PROFILE, 0o644);
  return {
    AWS_CONFIG_FILE: `${AWS_DIR_INSIDE}/config`,
    AWS_SHARED_CREDENTIALS_FILE: `${AWS_DIR_INSIDE}/credentials`,
  };
}
