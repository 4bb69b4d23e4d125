// Upstash accepts script shebang flags that open-source Redis does not (e.g. `allow-key-locking`, which
// @upstash/ratelimit's scripts declare). To run such scripts on a real redis-server, the flag is removed
// and the script's original SHA is mapped to the SHA of what was loaded, so EVALSHA by the original SHA
// keeps working in one round trip. Used by the local REST server and the benchmark's TCP adapter.
import { createHash } from 'node:crypto';

const UPSTASH_ONLY_FLAGS = new Set(['allow-key-locking']);

export const sha1 = (s: string) => createHash('sha1').update(s).digest('hex');

/** Returns the script with Upstash-only shebang flags removed (unchanged when there are none). */
export function stripUpstashFlags(script: string): string {
  const m = /^#!lua flags=([^\n]*)\n/.exec(script);
  if (!m) return script;
  const kept = m[1]!.split(',').map((f) => f.trim()).filter((f) => f && !UPSTASH_ONLY_FLAGS.has(f));
  return `${kept.length ? `#!lua flags=${kept.join(',')}` : '#!lua'}\n${script.slice(m[0].length)}`;
}

/** Remembers original SHA -> loaded SHA for rewritten scripts. */
export class ScriptShaMap {
  readonly #map = new Map<string, string>();
  /** The script to send for an EVAL/SCRIPT LOAD of `script`, remembering the SHA mapping. */
  script(script: string): string {
    const stripped = stripUpstashFlags(script);
    if (stripped !== script) this.#map.set(sha1(script), sha1(stripped));
    return stripped;
  }
  /** The SHA to send for an EVALSHA of `sha`. */
  sha(sha: string): string {
    return this.#map.get(sha.toLowerCase()) ?? sha;
  }
}
