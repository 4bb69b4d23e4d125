// Reads a JSON request body with a hard byte limit, without trusting Content-Length.
import { problemResponse } from './problem.js';

export const MAX_BODY_BYTES = 8 * 1024;

export type BodyResult = { ok: true; value: unknown } | { ok: false; response: Response };

export async function readJsonBody(req: Request, maxBytes = MAX_BODY_BYTES): Promise<BodyResult> {
  const type = req.headers.get('content-type') ?? '';
  const mediaType = type.split(';')[0]!.trim().toLowerCase();
  if (mediaType !== 'application/json') {
    return { ok: false, response: problemResponse('unsupported-media-type', `Content-Type must be application/json, got ${type ? JSON.stringify(type.slice(0, 80)) : 'none'}`) };
  }
  const declared = Number(req.headers.get('content-length') ?? '0');
  if (declared > maxBytes) return { ok: false, response: problemResponse('payload-too-large', `the body may be at most ${maxBytes} bytes`) };
  let text = '';
  if (req.body) {
    const reader = req.body.getReader();
    const decoder = new TextDecoder('utf-8', { fatal: true });
    let size = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        size += value.byteLength;
        if (size > maxBytes) {
          await reader.cancel().catch(() => {});
          return { ok: false, response: problemResponse('payload-too-large', `the body may be at most ${maxBytes} bytes`) };
        }
        text += decoder.decode(value, { stream: true });
      }
      text += decoder.decode();
    } catch {
      return { ok: false, response: problemResponse('invalid-json', 'the body is not valid UTF-8 or could not be read') };
    }
  }
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false, response: problemResponse('invalid-json', 'the body is not valid JSON') };
  }
}
