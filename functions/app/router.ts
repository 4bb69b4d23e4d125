// The deployable app's router: Hono's PatternRouter (hono/tiny's: one regular expression per route, tried
// in order), but matching a path exactly, trailing slash included, as Hono's strict routing (its default)
// promises and its RegExpRouter and TrieRouter do.
import { UnsupportedPathError, type Result, type Router } from 'hono/router';

const NO_PARAMS: Record<string, string> = Object.create(null);

/**
 * PatternRouter ends each route's expression with `/?$`, whatever `strict` says (honojs/hono#5406, open),
 * so `/v1/limits/:policy` took `PUT /v1/limits/free/`: a curl line with an empty `$KEY`, or a client's
 * `/v1/limits/free/.` once a URL parser had dropped the dot, changed every key of the policy where the
 * library's permitApp answers 404 (review 5, H1). This is PatternRouter with `$` in place of `/?$`, and
 * without optional parameters (`/:x?`), which the app has none of: such a route throws UnsupportedPathError
 * when it is added (supporting them was 25 bytes of the Worker's gzip budget).
 */
export class StrictPatternRouter<T> implements Router<T> {
  name = 'StrictPatternRouter';
  readonly #routes: [RegExp, string, T][] = [];

  add(method: string, path: string, handler: T): void {
    // `/x/*`: /x and every path below it; a path ending in `*` (a middleware's `*`): every path it starts;
    // any other: that path and no other (a route written with a trailing slash keeps it).
    const suffix = path.endsWith('/*') ? '(?:$|/)' : path.endsWith('*') ? '' : path.endsWith('/') ? '/$' : '$';
    path = path.replace(/\*$/, '');
    if (path.endsWith('?')) throw new UnsupportedPathError();
    const parts = (path.match(/\/?(:\w+(?:{(?:(?:{[\d,]+})|[^}])+})?)|\/?[^/?]+/g) ?? []).map((part) => {
      const param = /^\/:([^{]+)(?:{(.*)})?/.exec(part);
      return param ? `/(?<${param[1]}>${param[2] || '[^/]+'})` : part === '/*' ? '/[^/]+' : part.replace(/[.\\+*[^\]$()]/g, '\\$&');
    });
    try {
      this.#routes.push([new RegExp(`^${parts.join('')}${suffix}`), method, handler]);
    } catch {
      throw new UnsupportedPathError();
    }
  }

  match(method: string, path: string): Result<T> {
    const handlers: [T, Record<string, string>][] = [];
    for (const [pattern, routeMethod, handler] of this.#routes) {
      if (routeMethod !== method && routeMethod !== 'ALL') continue;
      const m = pattern.exec(path);
      if (m) handlers.push([handler, m.groups ?? NO_PARAMS]);
    }
    return [handlers];
  }
}
