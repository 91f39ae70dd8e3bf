export {
  ApprovalService,
  eventVisibleTo,
  isApprovalCategory,
  isApprovalStatus,
  type ApprovalServiceOptions,
  type CallOrigin,
  type CategoryHandler,
} from './service.js';
export type { AuditVerification } from './auditChain.js';
export {
  APPROVAL_CATEGORIES,
  APPROVAL_STATUSES,
  CreateApprovalRequest,
  DecideApprovalRequest,
  parseDuration,
  parseTtls,
  type ApprovalActor,
  type ApprovalCategory,
  type ApprovalChannel,
  type ApprovalEvent,
  type ApprovalRequest,
  type ApprovalStatus,
} from './types.js';
export { SlackNotifier, slackMessage, verifySlackSignature, type SlackConfig } from './notifiers/slack.js';
export { TeamsNotifier, type TeamsConfig, type TeamsLinks } from './notifiers/teams.js';
export { checkApprovalLink } from './deepLink.js';
export { createApprovals } from './runtime.js';
export type { AllowlistAsk, ApprovalEffects, Approvals, ApprovalsOptions, CommandGate } from './runtime.js';
export { gateCommand, matchCommand, type CommandGateMatch } from './commandGate.js';
