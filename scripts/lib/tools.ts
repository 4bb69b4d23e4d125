// The programs the tests (and the benchmark CI runs after them) need besides Node, and the Python modules
// the Python client's tests import: which test files use each, whether each is there, and what to do
// when one is not. Used by scripts/test-tools.ts, the first step of `npm test`: as root on Debian or
// Ubuntu it installs what is missing with apt-get; anywhere else it stops with one line that names the
// apt-get and Homebrew commands.
import { execFileSync, spawnSync } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';

export interface Tool {
  /** The program looked up on PATH. */
  bin: string;
  /** The Debian/Ubuntu package that provides it. */
  apt: string;
  /** The Homebrew formula that provides it; none where macOS has it already. */
  brew?: string;
  /** Whether a test file's text uses it (directly: the listing is for people, not a proof). */
  usedBy: (text: string) => boolean;
  /** Who needs it besides test files. */
  also?: string;
  /** An environment variable that, when set, names the program instead (it is then not looked up on PATH). */
  env?: string;
  /**
   * `bin` is a Python module, not a program: it is there when the tests' python3 (pythonPath) finds it.
   * Debian's python3, not the first on PATH (a pyenv shim, say), since apt-get installs into its modules.
   */
  python?: true;
}

/** The python3 the Python client's tests run on: Debian's, whose modules apt-get installs. */
export const DEBIAN_PYTHON = '/usr/bin/python3';

/** That python3, or the one EDGE_LIMITER_PYTHON names. */
export function pythonPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.EDGE_LIMITER_PYTHON || DEBIAN_PYTHON;
}

/** The modules `python` cannot find (without importing them); every one of them when it does not run. */
export function missingPythonModules(modules: readonly string[], python: string): Set<string> {
  const found = spawnSync(python, ['-c', 'import importlib.util, sys\nprint(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))', ...modules], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (found.status !== 0) return new Set(modules);
  return new Set(found.stdout.split(/\s+/).filter(Boolean));
}

export const TOOLS: readonly Tool[] = [
  {
    bin: 'redis-server',
    apt: 'redis-server',
    brew: 'redis',
    usedBy: (t) => /inject\('redisUrl'\)|startRedis(Cluster)?\(/.test(t),
    also: 'every run: test/support/global-setup.ts starts one',
  },
  { bin: 'redis-cli', apt: 'redis-tools', brew: 'redis', usedBy: (t) => /startRedisCluster\(/.test(t) },
  {
    bin: 'faketime',
    apt: 'faketime',
    brew: 'libfaketime',
    usedBy: (t) => /skewSeconds|\(\s*'faketime'\s*,/.test(t),
    also: "the benchmark's clock-skew rows (bench/accuracy.ts), which .ci/run runs after the tests",
  },
  { bin: 'curl', apt: 'curl', brew: 'curl', usedBy: (t) => /\bcurl\b/.test(t) && /'sh', \['-c'/.test(t) },
  { bin: 'ps', apt: 'procps', usedBy: (t) => /\(\s*'ps'\s*,/.test(t) },
  // Debian's chromium, driven by playwright-core (no browser download); elsewhere CHROMIUM_PATH.
  { bin: 'chromium', apt: 'chromium', usedBy: (t) => /launchChromium\(/.test(t), env: 'CHROMIUM_PATH' },
  // The Python client (clients/python): its examples' frameworks, mypy, and pip (which brings setuptools) for its install test.
  { bin: 'aiohttp', apt: 'python3-aiohttp', python: true, usedBy: (t) => /aiohttp_session\.py/.test(t) },
  { bin: 'celery', apt: 'python3-celery', python: true, usedBy: (t) => /celery_task\.py/.test(t) },
  { bin: 'fastapi', apt: 'python3-fastapi', python: true, usedBy: (t) => /fastapi_dependency\.py/.test(t) },
  { bin: 'httpx', apt: 'python3-httpx', python: true, usedBy: (t) => /fastapi_dependency\.py/.test(t), also: "FastAPI's TestClient" },
  { bin: 'mypy', apt: 'mypy', python: true, usedBy: (t) => /'mypy'/.test(t) },
  { bin: 'pip', apt: 'python3-pip', python: true, usedBy: (t) => /test_package/.test(t) },
];

/** The absolute path of `bin` on `path` (a PATH value), if an executable file is there. */
export function which(bin: string, path: string | undefined): string | undefined {
  for (const dir of (path ?? '').split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, bin);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Each tool with the test files (under `root`/test, `*.test.ts`) that use it. */
export function toolUsers(root: string, tools: readonly Tool[] = TOOLS): { tool: Tool; files: string[] }[] {
  const tests = (readdirSync(join(root, 'test'), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => `test/${f.split('\\').join('/')}`)
    .sort();
  const texts = new Map(tests.map((f) => [f, readFileSync(join(root, f), 'utf8')]));
  return tools.map((tool) => ({ tool, files: tests.filter((f) => tool.usedBy(texts.get(f)!)) }));
}

/** One line per tool: who needs it. */
export function listing(root: string, tools: readonly Tool[] = TOOLS): string[] {
  return toolUsers(root, tools).map(({ tool, files }) => {
    const who = [tool.also, files.length ? `${files.length} test file${files.length === 1 ? '' : 's'}: ${files.join(', ')}` : 'no test file'].filter(Boolean);
    return `${tool.bin} (apt ${tool.apt}${tool.brew ? `, brew ${tool.brew}` : ''}): ${who.join('; ')}`;
  });
}

/** The one line that says what is missing and how to install it, with apt-get and with Homebrew. */
export function installLine(missing: readonly Tool[], why = ''): string {
  const uniq = (xs: (string | undefined)[]) => [...new Set(xs.filter((x): x is string => !!x))];
  const apt = uniq(missing.map((t) => t.apt));
  const brew = uniq(missing.map((t) => t.brew));
  const programs = missing.filter((t) => !t.python).map((t) => t.bin);
  const modules = missing.filter((t) => t.python).map((t) => t.bin);
  const names = [
    programs.length ? `${programs.join(', ')}, not found on PATH` : '',
    modules.length ? `the Python module${modules.length === 1 ? '' : 's'} ${modules.join(', ')}, not found by ${DEBIAN_PYTHON}` : '',
  ]
    .filter(Boolean)
    .join(', and ');
  return (
    `${why}the tests need ${names}: install ${missing.length === 1 ? 'it' : 'them'} with ` +
    `\`sudo apt-get install -y ${apt.join(' ')}\` (Debian/Ubuntu; npm test runs this itself when run as root)` +
    (brew.length ? ` or \`brew install ${brew.join(' ')}\` (macOS)` : '') +
    ', then run npm test again'
  );
}

/** Debian, Ubuntu or a derivative, from the text of /etc/os-release. */
export function debianLike(osRelease: string): boolean {
  const field = (name: string) => new RegExp(`^${name}=["']?([^"'\\n]*)`, 'm').exec(osRelease)?.[1] ?? '';
  return `${field('ID')} ${field('ID_LIKE')}`.split(/\s+/).some((id) => id === 'debian' || id === 'ubuntu');
}

export function readOsRelease(): string {
  for (const file of ['/etc/os-release', '/usr/lib/os-release']) {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      // try the next
    }
  }
  return '';
}

export interface EnsureOptions {
  /** The checkout (for the listing). */
  root: string;
  /** PATH and the rest of the environment (apt-get runs with it). @default process.env */
  env?: NodeJS.ProcessEnv;
  /** @default process.getuid() */
  uid?: number;
  /** The text of /etc/os-release. @default read from the system */
  osRelease?: string;
  tools?: readonly Tool[];
  /** Progress lines (stdout). */
  log?: (line: string) => void;
}

export type EnsureResult = { ok: true; installed: string[] } | { ok: false; line: string };

/**
 * Prints who needs which tool, then checks each is on PATH. What is missing is installed with apt-get
 * when running as root on a Debian-like system that has apt-get; otherwise (or when that fails) the
 * result is the one line to show.
 */
export function ensureTools(options: EnsureOptions): EnsureResult {
  const env = options.env ?? process.env;
  const tools = options.tools ?? TOOLS;
  const log = options.log ?? ((line) => console.log(line));
  for (const line of listing(options.root, tools)) log(`[test-tools] ${line}`);
  const missingNow = () => {
    const modules = tools.filter((t) => t.python).map((t) => t.bin);
    const absent = modules.length ? missingPythonModules(modules, pythonPath(env)) : new Set<string>();
    return tools.filter((t) => (t.python ? absent.has(t.bin) : !(t.env && env[t.env]) && !which(t.bin, env.PATH)));
  };
  const missing = missingNow();
  if (missing.length === 0) return { ok: true, installed: [] };

  const uid = options.uid ?? process.getuid?.();
  const aptGet = which('apt-get', env.PATH);
  if (uid !== 0 || !aptGet || !debianLike(options.osRelease ?? readOsRelease())) return { ok: false, line: installLine(missing) };

  const packages = [...new Set(missing.map((t) => t.apt))];
  log(`[test-tools] ${missing.map((t) => t.bin).join(', ')} not on PATH: apt-get install -y ${packages.join(' ')} (root on a Debian-like system)`);
  const aptEnv = { ...env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    execFileSync(aptGet, ['update', '-qq'], { env: aptEnv, stdio: ['ignore', 'ignore', 'pipe'] });
    execFileSync(aptGet, ['install', '-y', '-qq', '--no-install-recommends', ...packages], { env: aptEnv, stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const e = err as { status?: number; stderr?: Buffer | string; message: string };
    const detail = String(e.stderr ?? '').trim().split('\n').at(-1) || e.message;
    return { ok: false, line: installLine(missing, `apt-get failed (exit ${e.status ?? '?'}: ${detail}); `) };
  }
  const still = missingNow();
  if (still.length > 0) return { ok: false, line: installLine(still, `apt-get installed ${packages.join(' ')}, but `) };
  log(`[test-tools] installed ${packages.join(' ')}`);
  return { ok: true, installed: packages };
}
