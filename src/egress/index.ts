export { checkAddress, classifyAddress, AddressRanges } from './addresses.js';
export type { AddressClass, AddressVerdict } from './addresses.js';
export { canonicalizeHost, hostForAuthority } from './canonical.js';
export type { CanonicalHost, HostRefusal, HostRefusalCode } from './canonical.js';
export { createEgressPolicy, defaultPort, EgressPolicy } from './policy.js';
export type { EgressPolicyConfig, EgressProtocol, PolicyOutcome } from './policy.js';
export { createDnsResolver, createHostsResolver, ResolveError } from './resolver.js';
export type { DnsResolverOptions, HostsEntry, Resolver, ResolveErrorCode } from './resolver.js';
export { EgressProxy } from './proxy.js';
export { CredentialBroker } from './broker.js';
export type { BrokerOptions, CredentialBinding } from './broker.js';
export { LlmGateway, parseGatewayConfig } from './gateway.js';
export type { LlmRequestRecord } from './gateway.js';
export { Authorities } from './certificates.js';
export { parseBinding } from './bindings.js';
export type { CredentialEntry } from './bindings.js';
export { DEFAULT_EGRESS_LIMITS, INTERNAL_SUFFIX } from './types.js';
export type {
  AskAnswer,
  AskContext,
  AskDecision,
  AskHook,
  EgressDecision,
  EgressLimits,
  EgressProxyOptions,
  EgressReason,
  InternalService,
  InternalTarget,
} from './types.js';
export { EgressJournal } from './journal.js';
export type { EgressRecord } from './journal.js';
