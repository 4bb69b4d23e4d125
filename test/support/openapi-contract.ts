// Holds responses of the permit API to its OpenAPI document (src/http/openapi.ts): a recorder checks
// each response against the operation it answers (a documented status, the media type, the body against
// its schema, every required header, every documented header's pattern) and remembers which documented
// responses and which schema fields it has seen, so that test/http/openapi.test.ts can fail on a part
// of the document no real response shows. `checked(app)` wraps a Hono app's request() with a recorder.
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ValidateFunction } from 'ajv';
import { openApiDocument } from '../../src/http/openapi.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const doc = openApiDocument as unknown as Json;

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema({ $id: 'openapi', components: doc.components });
const compiled = new Map<object, ValidateFunction>();
function validatorOf(schema: Json): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    // Its references are the document's: point them at the schema added as "openapi".
    v = ajv.compile(JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"openapi#/components/')) as Json);
    compiled.set(schema, v);
  }
  return v;
}

const deref = (o: Json): Json => (o.$ref ? (o.$ref as string).split('/').slice(1).reduce((x: Json, k) => x[k], doc) : o);

/** The document's path template a request path falls under, or undefined. */
export function templateOf(path: string): string | undefined {
  for (const template of Object.keys(doc.paths)) {
    const pattern = new RegExp(`^${template.replace(/[.]/g, '\\.').replace(/\{key\}$/, '.+').replace(/\{[^}]+\}/g, '[^/]+')}$`);
    if (pattern.test(path)) return template;
  }
  return undefined;
}

export interface Recorder {
  /** Checks one response (not consumed: a clone is read); throws with what differs. */
  check(method: string, path: string, res: Response): Promise<void>;
  /** "METHOD template status" of every documented response seen. */
  readonly responses: Set<string>;
  /** Per schema (and nested object, as "Schema.field"), the fields seen in bodies. */
  readonly fields: Map<string, Set<string>>;
}

export function recorder(): Recorder {
  const responses = new Set<string>();
  const fields = new Map<string, Set<string>>();
  const seen = (name: string, key: string) => {
    let s = fields.get(name);
    if (!s) fields.set(name, (s = new Set()));
    s.add(key);
  };
  // Records the fields of `data` under `name`, following the schema into refs, arrays, maps and nested objects.
  const observe = (name: string, schema: Json, data: unknown) => {
    if (schema.$ref) return observe((schema.$ref as string).split('/').pop()!, deref(schema), data);
    for (const part of (schema.allOf ?? []) as Json[]) observe(name, part, data);
    if (Array.isArray(data) && schema.items) return data.forEach((x) => observe(name, schema.items, x));
    if (typeof data !== 'object' || data === null) return;
    for (const [k, v] of Object.entries(data)) {
      if (schema.properties?.[k]) {
        seen(name, k);
        observe(`${name}.${k}`, schema.properties[k], v);
      } else if (typeof schema.additionalProperties === 'object') observe(name, schema.additionalProperties, v);
    }
  };

  return {
    responses,
    fields,
    async check(method, path, res) {
      // Gateway mode forwards every other path to the origin: not the permit API.
      if (path !== '/healthz' && !path.startsWith('/v1/')) return;
      const where = `${method} ${path} → ${res.status}`;
      const template = templateOf(path);
      const operation: Json | undefined = template ? doc.paths[template][method.toLowerCase()] : undefined;
      const text = await res.clone().text();
      const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
      if (!operation) {
        // Not a documented operation (an unknown route, another method): a problem, always.
        if (type !== 'application/problem+json') throw new Error(`${where}: an undocumented operation must answer problem+json, got ${type || 'no type'}`);
        const v = validatorOf({ $ref: '#/components/schemas/Problem' });
        const body = JSON.parse(text) as Json;
        if (!v(body)) throw new Error(`${where}: ${ajv.errorsText(v.errors)}`);
        if (body.status !== res.status) throw new Error(`${where}: the problem says status ${body.status}`);
        return;
      }
      const status = String(res.status);
      const documented: Json | undefined = operation.responses[status] ?? (res.status >= 500 ? operation.responses.default : undefined);
      if (!documented) throw new Error(`${where}: status ${status} is not documented for ${method} ${template}`);
      if (operation.responses[status]) responses.add(`${method.toUpperCase()} ${template} ${status}`);
      for (const [name, h] of Object.entries((documented.headers ?? {}) as Json)) {
        const header = deref(h);
        const value = res.headers.get(name);
        if (value === null) {
          if (header.required) throw new Error(`${where}: required header ${name} is missing`);
          continue;
        }
        if (header.schema?.pattern && !new RegExp(header.schema.pattern).test(value)) throw new Error(`${where}: header ${name}: ${JSON.stringify(value)} does not match ${header.schema.pattern}`);
      }
      if (!documented.content) {
        if (text !== '') throw new Error(`${where}: documented without a body, got ${JSON.stringify(text.slice(0, 200))}`);
        return;
      }
      const media = documented.content[type];
      if (!media) throw new Error(`${where}: Content-Type ${type || 'none'} is not documented (${Object.keys(documented.content).join(', ')})`);
      const body = JSON.parse(text);
      if (type === 'application/problem+json' && body.status !== res.status) throw new Error(`${where}: the problem says status ${body.status}`);
      const v = validatorOf(media.schema);
      if (!v(body)) throw new Error(`${where}: the body does not match the document: ${ajv.errorsText(v.errors)}\n${text.slice(0, 500)}`);
      observe('', media.schema, body);
    },
  };
}

/** One recorder per test file, for the checks wrapped apps make. */
export const fileRecorder = recorder();

/** The path of a request() input. */
function pathOf(input: string | URL | Request): string {
  const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
  return new URL(url, "http://contract.test").pathname;
}

interface Requestable {
  request: (input: string | URL | Request, init?: RequestInit, ...rest: any[]) => Response | Promise<Response>; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** The app, with every response its request() gives checked against the document first. */
export function checked<T extends Requestable>(app: T, rec: Recorder = fileRecorder): T {
  const request = app.request.bind(app);
  app.request = async (input, init, ...rest) => {
    const res = await request(input, init, ...rest);
    const method = init?.method ?? (input instanceof Request ? input.method : 'GET');
    await rec.check(method, pathOf(input), res);
    return res;
  };
  return app;
}
