import { isAbsolute, resolve } from 'node:path';
import type { ApprovalRequest } from '../../../approvals/index.js';
import type { CommandContext } from '../../context.js';

/**
 * `atelier workshops publish ID --branch NAME [--remote URL] [--title …]`: files a PR_GATEWAY
 * request. The server computes the diff from the workspace; once a person approves, the server
 * commits the workspace and pushes the branch (the caller never pushes anything).
 */
export async function publishWorkshop(
  ctx: CommandContext,
  id: string,
  flags: { branch: string; remote?: string; title?: string; justification?: string },
): Promise<ApprovalRequest> {
  // A relative local path is made absolute here, as for `workshops create --repo`.
  const remote =
    flags.remote === undefined || /^[A-Za-z][A-Za-z0-9+.-]*:|^[^/]+@[^/]+:/.test(flags.remote) || isAbsolute(flags.remote)
      ? flags.remote
      : resolve(flags.remote);
  const payload = {
    branch: flags.branch,
    ...(remote !== undefined ? { remote } : {}),
    ...(flags.title !== undefined ? { title: flags.title } : {}),
    justification: flags.justification ?? `publish the workspace as branch ${flags.branch}`,
  };
  return (await ctx.api()).call('createApproval', { params: { id }, body: { category: 'PR_GATEWAY', payload } });
}
