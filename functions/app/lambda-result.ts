// The Lambda entry's Response → result step, in the shape the event's source reads back. The body's
// bytes go through unchanged: as text when they are valid UTF-8, else base64 (a REST API passes base64
// on as bytes only for the media types in its binaryMediaTypes; see docs/deploying.md, AWS Lambda).
import type { EventKind } from './lambda-request.js';

export interface LambdaResult {
  statusCode: number;
  headers?: Record<string, string>;
  multiValueHeaders?: Record<string, string[]>;
  /** HTTP API and Function URLs only: each Set-Cookie value. */
  cookies?: string[];
  body: string;
  isBase64Encoded: boolean;
}

// fatal: bytes that are not UTF-8 go as base64; ignoreBOM: a leading BOM is kept, not eaten.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function utf8Text(bytes: Uint8Array): string | undefined {
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * A header value as a Headers object holds it (one character per byte) back to the text AWS writes out
 * as UTF-8, so UTF-8 bytes from the origin reach the client as they were. Bytes that are not UTF-8
 * have no way through a result's JSON; they go as the Latin-1 characters they spell.
 */
function headerText(value: string): string {
  if (!/[^\x00-\x7f]/.test(value)) return value;
  return utf8Text(Buffer.from(value, 'latin1')) ?? value;
}

/**
 * The name `set-cookie` spelt a different way for each of `count` cookies (bit k of i capitalises its
 * k-th letter): a result's `headers` holds one value per key, and an ALB without multi-value headers
 * sends each differently cased key as a header of its own. 2^9 spellings; more cookies than that are
 * dropped, with a log line.
 */
function setCookieSpellings(count: number): string[] {
  const letters = [...'set-cookie'];
  const out: string[] = [];
  for (let i = 0; out.length < count && i < 512; i++) {
    let bit = 0;
    out.push(letters.map((ch) => (ch === '-' ? ch : i & (1 << bit++) ? ch.toUpperCase() : ch)).join(''));
  }
  if (out.length < count) console.warn(JSON.stringify({ msg: 'an ALB without multi-value headers can carry 512 Set-Cookie headers; the rest were dropped', count }));
  return out;
}

export async function toResult(kind: EventKind, res: Response): Promise<LambdaResult> {
  const bytes = Buffer.from(await res.arrayBuffer());
  const text = utf8Text(bytes);
  const body = text ?? bytes.toString('base64');
  const result = { statusCode: res.status, body, isBase64Encoded: text === undefined };
  const cookies = res.headers.getSetCookie().map(headerText);
  // Repeated fields other than Set-Cookie are one value joined with ", " (Headers does that).
  const single: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    if (name !== 'set-cookie') single[name] = headerText(value);
  });
  if (kind === 'v1' || kind === 'alb-multi') {
    const multiValueHeaders: Record<string, string[]> = {};
    for (const [name, value] of Object.entries(single)) multiValueHeaders[name] = [value];
    if (cookies.length > 0) multiValueHeaders['set-cookie'] = cookies;
    return { ...result, multiValueHeaders };
  }
  if (kind === 'v2') return { ...result, headers: single, ...(cookies.length > 0 ? { cookies } : {}) };
  const spellings = setCookieSpellings(cookies.length);
  spellings.forEach((name, i) => (single[name] = cookies[i]!));
  return { ...result, headers: single };
}
