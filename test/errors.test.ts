// Every error class names itself in a string, so `err.name` survives a minified bundle (the Worker's
// wrangler.toml sets minify and keep_names = false, which rename classes).
import { describe, expect, it } from 'vitest';
import { AcquireTimeoutError, ConfigError, IdempotencyConflictError, InvalidInputError, LimiterError, StoreError, UnknownPolicyError } from '../src/errors.js';
import { PermitError } from '../src/client/permit-client.js';

describe('error names', () => {
  it('each class sets its own name, not the (minifiable) constructor name', () => {
    const errors = [
      new LimiterError('x', 'm'),
      new ConfigError('f', 'm'),
      new InvalidInputError('f', 'm'),
      new IdempotencyConflictError(),
      new UnknownPolicyError('p'),
      new StoreError('s', 'm'),
      new AcquireTimeoutError('m', 1),
      new PermitError(500, undefined),
    ];
    for (const e of errors) expect(e.name).toBe(e.constructor.name);
  });
});
