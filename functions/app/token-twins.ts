// A plain secret in PERMIT_TOKENS equal to another token's `sha256:` form, found at start on Node (the
// Node server and the Lambda handler) with node:crypto. The Worker finds it at its first request instead
// (WebCrypto's digest is async there), answering a bare 500 and logging which token.
import { createHash } from 'node:crypto';
import type { PermitToken } from '../../src/http/auth.js';
import { ConfigError } from '../../src/errors.js';

/** Throws a ConfigError naming `PERMIT_TOKENS[i].secret` (never the secret) when two tokens' digests are equal. */
export function assertNoHashedTwins(tokens: readonly (string | PermitToken)[]): void {
  const seen = new Map<string, number>();
  tokens.forEach((t, i) => {
    const secret = typeof t === 'string' ? t : t.secret;
    const hex = /^sha256:[0-9a-f]{64}$/.test(secret) ? secret.slice(7) : createHash('sha256').update(secret).digest('hex');
    const first = seen.get(hex);
    if (first !== undefined) throw new ConfigError(`PERMIT_TOKENS[${i}].secret`, `is the secret of PERMIT_TOKENS[${first}] (one plain, one hashed)`);
    seen.set(hex, i);
  });
}
