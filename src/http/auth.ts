// Bearer-token check for the permit API. Tokens are compared as SHA-256 digests, byte by byte with no
// early exit, so neither the token's content nor its length shows in the timing. Tokens are never logged.

const encoder = new TextEncoder();

async function digest(s: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(s)));
}

function equal32(a: Uint8Array, b: Uint8Array): boolean {
  let diff = 0;
  for (let i = 0; i < 32; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

export interface TokenChecker {
  /** True when the Authorization header carries one of the configured tokens. */
  check(authorization: string | undefined): Promise<boolean>;
  readonly configured: boolean;
}

export function tokenChecker(tokens: readonly string[]): TokenChecker {
  const digests = Promise.all(tokens.map(digest));
  return {
    configured: tokens.length > 0,
    async check(authorization) {
      const all = await digests;
      if (all.length === 0 || !authorization) return false;
      const m = /^Bearer +([^\s]+) *$/i.exec(authorization);
      const presented = await digest(m ? m[1]! : '');
      let ok = false;
      // Compare against every token, so the position of a match does not show either.
      for (const d of all) ok = equal32(presented, d) || ok;
      return ok && m !== null;
    },
  };
}
