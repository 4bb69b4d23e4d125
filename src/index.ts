// Root entry: the limiter, the memory store and the types. Imports no database driver or Redis SDK.
export { createLimiter } from './limiter.js';
export type { Limiter, LimiterOptions, LimiterStats, TakeOptions, AcquireOptions, DecisionEvent, CircuitBreakerOptions, CircuitState, StoreStatusEvent, WaitUntil } from './limiter.js';
export type { Decision, DecisionReason, BucketDecision, StoreErrorDecision } from './core/decision.js';
export type { PolicyConfig, ResolvedPolicy, FailMode, LeaseConfig, LeaseSettings } from './core/policy.js';
export type { Store, StepArgs, StepResult } from './store.js';
export { memoryStore } from './stores/memory.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory.js';
export { LimiterError, ConfigError, InvalidInputError, UnknownPolicyError, StoreError, AcquireTimeoutError } from './errors.js';
