// Root entry: the limiter, the memory store and the types. Imports no database driver or Redis SDK.
export { createLimiter } from './limiter.js';
export type { Limiter, LimiterOptions, LimiterStats, TakeOptions, AcquireOptions, AdjustOptions, AdminOptions, AuditAction, AuditEvent, SettleChargeOptions, DecisionEvent, KeyLimits, PolicyLimits, LimitsState, LimitsInput, SetLimitsOptions, BlockOptions, CircuitBreakerOptions, CircuitState, StoreStatusEvent, WaitUntil } from './limiter.js';
export type { Decision, DecisionReason, BucketDecision, StoreErrorDecision, LimitDecision, LimitNumbers } from './core/decision.js';
export type { PolicyConfig, PolicyOptions, LimitConfig, RefillLimitConfig, Refill, LocalLimitConfig, ResolvedPolicy, ResolvedLimit, FailMode, LeaseConfig, LeaseSettings } from './core/policy.js';
export type { Cost } from './core/key.js';
export type { Store, StepArgs, StepResult, StepBase, OverrideArgs, OverrideLimit, OverrideRecord, OverrideResult, PolicyOverride } from './store.js';
export type { LimitStep } from './core/gcra.js';
export { settle, costDifference } from './settle.js';
export type { Settles, SettleFailure, SettleOptions } from './settle.js';
export { memoryStore } from './stores/memory.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory.js';
export { LimiterError, ConfigError, InvalidInputError, IdempotencyConflictError, UnknownChargeError, UnknownPolicyError, StoreError, AcquireTimeoutError } from './errors.js';
