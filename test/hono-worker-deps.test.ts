// The Worker's hono/hono-base (scripts/build-worker-deps.mjs buildWorkerHono, wrangler.toml's [alias])
// against the package's own: the same class but for the deprecated mount(), routing the same requests to
// the same answers, with the package's own Context and errors; and a build that stops on a hono-base.js
// of a shape the script does not know.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HonoBase as PackageHonoBase } from 'hono/hono-base';
import { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { RegExpRouter } from 'hono/router/reg-exp-router';
import { buildWorkerHono, cutHonoMount } from '../scripts/build-worker-deps.mjs';

let dir: string;
let CutHonoBase: typeof PackageHonoBase;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'edge-limiter-worker-hono-'));
  CutHonoBase = ((await import(pathToFileURL(buildWorkerHono(dir)).href)) as { HonoBase: typeof PackageHonoBase }).HonoBase;
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const members = (o: object) => [...Object.getOwnPropertyNames(Object.getPrototypeOf(o)), ...Object.keys(o)].sort();

describe("the Worker's hono/hono-base", () => {
  it('has every member of the package\'s HonoBase but mount()', () => {
    const mine = new CutHonoBase({ router: new RegExpRouter() });
    const theirs = new PackageHonoBase({ router: new RegExpRouter() });
    expect(members(theirs)).toContain('mount');
    expect(members(mine)).toEqual(members(theirs).filter((m) => m !== 'mount'));
  });

  it('routes the same requests to the same answers, with the package\'s Context and HTTPException', async () => {
    const app = (B: typeof PackageHonoBase) => {
      const a = new B({ router: new RegExpRouter() });
      a.use('*', async (c, next) => {
        await next();
        c.header('X-Seen', String(c instanceof Context));
      });
      a.get('/a/:id', (c) => c.text(`a ${c.req.param('id')}`));
      a.post('/b', async (c) => c.json({ body: await c.req.text() }, 201));
      a.get('/teapot', () => {
        throw new HTTPException(418, { message: 'short and stout' });
      });
      a.onError((e, c) => c.text(`error ${e instanceof HTTPException ? e.status : 'other'}`, e instanceof HTTPException ? e.status : 500));
      a.notFound((c) => c.text('none here', 404));
      return a;
    };
    const answers = async (B: typeof PackageHonoBase) => {
      const a = app(B);
      const out: unknown[] = [];
      for (const req of [new Request('http://x/a/7'), new Request('http://x/b', { method: 'POST', body: 'hi' }), new Request('http://x/teapot'), new Request('http://x/zzz'), new Request('http://x/a/7', { method: 'HEAD' })]) {
        const res = await a.fetch(req);
        out.push([res.status, res.headers.get('X-Seen'), await res.text()]);
      }
      return out;
    };
    const mine = await answers(CutHonoBase);
    expect(mine).toEqual(await answers(PackageHonoBase));
    expect(mine[0]).toEqual([200, 'true', 'a 7']);
    expect(mine[2]).toEqual([418, 'true', 'error 418']);
  });

  it('imports the package\'s own modules, and nothing of mount()', () => {
    const text = readFileSync(join(dir, 'hono-base.mjs'), 'utf8');
    const imports = [...text.matchAll(/from "([^"]+)"/g)].map((m) => m[1]!);
    expect(imports.length).toBeGreaterThan(3);
    for (const i of imports) expect(i).toMatch(/node_modules\/hono\/dist\//);
    expect(text).not.toMatch(/mount\.js|helper\/route|mount\(path/);
  });

  it('stops the build on a hono-base.js of a shape it does not know', () => {
    const code = readFileSync(fileURLToPath(import.meta.resolve('hono/hono-base')), 'utf8');
    expect(cutHonoMount(code)).not.toContain('createMountedRequest');
    expect(() => cutHonoMount(code.replace('\tmount(path, applicationHandler, options) {', '\tmount(path, handler) {'))).toThrow(/hono: not one mount\(\) method/);
    expect(() => cutHonoMount(code.replace('import { routePath } from "./helper/route/index.js";\n', ''))).toThrow(/hono: no "import \{ routePath \}/);
    expect(() => cutHonoMount(code.replace('#addRoute(method, path, handler, baseRoutePath) {', '#addRoute(method, path, handler) {'))).toThrow(/#addRoute after mount/);
    expect(() => cutHonoMount(code + '\nexport const m = (c) => routePath(c);\n')).toThrow(/still uses what mount\(\) used/);
    // A member a newer hono puts beside mount() is never cut with it (review 14, F1: it went silently).
    const between = code.replace('\n\t#addRoute(method, path, handler, baseRoutePath) {', '\n\tfetchWithRetry(req) {\n\t\treturn this.fetch(req);\n\t}\n\t#addRoute(method, path, handler, baseRoutePath) {');
    expect(() => cutHonoMount(between)).toThrow(/not one doc comment and one method right before #addRoute/);
    const before = code.replace('\tmount(path, applicationHandler, options) {\n', '\tfoo = 1;\n\tbar() { return 2; }\n\tmount(path, applicationHandler, options) {\n');
    expect(() => cutHonoMount(before)).toThrow(/not one doc comment and one method right before #addRoute/);
  });
});
