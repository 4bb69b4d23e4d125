// The first step of `npm test` (scripts/test-tools.ts, scripts/lib/tools.ts): it says which test files
// need which program; when one is missing it installs it with apt-get as root on a Debian-like system,
// and anywhere else stops at once with one line naming the apt-get and Homebrew commands. Programs on
// PATH are stand-ins here (shell scripts in a temporary directory), apt-get and python3 too: nothing is
// installed (a Python module is a file of its name beside the stand-in python3, which finds those).
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureTools, installLine, TOOLS } from '../scripts/lib/tools.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/**
 * A directory for PATH holding stand-ins for `bins`, and a stand-in python3 (EDGE_LIMITER_PYTHON in
 * envOf) that finds a module when a file of its name is beside it (tools.ts asks `python3 -c <program>
 * <module>...` and reads the missing ones from its output).
 */
function binDir(bins: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'edge-limiter-path-'));
  dirs.push(dir);
  for (const b of bins) writeFileSync(join(dir, b), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  writeFileSync(join(dir, 'python3-stand-in'), '#!/bin/sh\nhere="${0%/*}"\nshift 2\nfor m in "$@"; do [ -e "$here/$m" ] || printf \'%s \' "$m"; done\necho\n', { mode: 0o755 });
  return dir;
}

/** The environment of a run with `dir` as PATH and its stand-in python3. */
const envOf = (dir: string) => ({ PATH: dir, EDGE_LIMITER_PYTHON: join(dir, 'python3-stand-in') });

/**
 * A stand-in apt-get: logs its arguments to apt-get.log beside it; `install` puts a stand-in for each
 * package's program in its directory (or fails with `exitCode`).
 */
function fakeAptGet(dir: string, exitCode = 0): () => string[] {
  const programs = Object.fromEntries(TOOLS.map((t) => [t.apt, t.bin]));
  const cases = Object.entries(programs)
    .map(([pkg, bin]) => `    ${pkg}) printf '#!/bin/sh\\nexit 0\\n' > "$here/${bin}"; /bin/chmod 755 "$here/${bin}" ;;`)
    .join('\n');
  writeFileSync(
    join(dir, 'apt-get'),
    `#!/bin/sh
here="\${0%/*}"
echo "$*" >> "$here/apt-get.log"
[ ${exitCode} -eq 0 ] || { echo "E: Unable to locate package" >&2; exit ${exitCode}; }
[ "$1" = install ] || exit 0
for p in "$@"; do
  case "$p" in
${cases}
  esac
done
`,
    { mode: 0o755 },
  );
  return () => (existsSync(join(dir, 'apt-get.log')) ? readFileSync(join(dir, 'apt-get.log'), 'utf8').trim().split('\n') : []);
}

/**
 * Runs `npm test`'s first step as a child with this PATH. Without apt-get on it, it cannot install
 * whoever runs it (root or not): as on macOS, or a system without apt.
 */
function runCli(path: string): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', 'scripts/test-tools.ts'], { cwd: root, env: { ...envOf(path), HOME: tmpdir() } }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr, ms: performance.now() - started }),
    );
  });
}

const others = TOOLS.map((t) => t.bin).filter((b) => b !== 'redis-server');
const DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n';
const UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n';
const FEDORA = 'NAME="Fedora Linux"\nID=fedora\n';

describe('npm test: the programs the tests need', () => {
  it('runs first in npm test', () => {
    const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.test!.split(' && ')[0]).toBe('tsx scripts/test-tools.ts');
  });

  it('without redis-server on PATH and without apt-get: exit 1 at once with one line naming apt-get and brew', async () => {
    const { code, stdout, stderr, ms } = await runCli(binDir(others));
    expect(code).toBe(1);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe(
      '[test-tools] the tests need redis-server, not found on PATH: install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu; npm test runs this itself when run as root) or `brew install redis` (macOS), then run npm test again',
    );
    expect(ms).toBeLessThan(10_000); // at once: no install attempted, no test started
    // The listing comes first: each program with the test files that use it.
    const listed = stdout.trim().split('\n');
    expect(listed.map((l) => /^\[test-tools\] (\S+) /.exec(l)?.[1])).toEqual(TOOLS.map((t) => t.bin));
    expect(listed[0]).toMatch(/^\[test-tools\] redis-server \(apt redis-server, brew redis\): every run: test\/support\/global-setup\.ts starts one; \d+ test files: .*test\/redis-store\.test\.ts/);
    expect(listed.find((l) => l.startsWith('[test-tools] redis-cli '))).toContain('test/redis-cluster.test.ts');
  });

  it('with none of them and no apt-get: the same one line, naming every missing program', async () => {
    const { code, stderr } = await runCli(binDir([]));
    expect(code).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([`[test-tools] ${installLine(TOOLS)}`]);
    expect(stderr).toContain('`sudo apt-get install -y redis-server redis-tools faketime curl procps chromium python3-aiohttp python3-celery python3-fastapi python3-httpx mypy python3-pip`');
    expect(stderr).toContain('the tests need redis-server, redis-cli, faketime, curl, ps, chromium, not found on PATH, and the Python modules aiohttp, celery, fastapi, httpx, mypy, pip, not found by /usr/bin/python3: ');
    expect(stderr).toContain('`brew install redis libfaketime curl`');
  });

  it('with everything on PATH: exit 0, nothing installed', async () => {
    const dir = binDir(TOOLS.map((t) => t.bin));
    const aptCalls = fakeAptGet(dir);
    const { code, stderr } = await runCli(dir);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(aptCalls()).toEqual([]);
  });

  it('not root, on Debian with apt-get: the one line, apt-get not run', () => {
    const dir = binDir(others);
    const aptCalls = fakeAptGet(dir);
    const result = ensureTools({ root, env: envOf(dir), uid: 1000, osRelease: DEBIAN, log: () => {} });
    expect(result).toEqual({ ok: false, line: installLine(TOOLS.filter((t) => t.bin === 'redis-server')) });
    expect(aptCalls()).toEqual([]);
  });

  for (const [system, osRelease] of [
    ['Debian', DEBIAN],
    ['Ubuntu', UBUNTU],
  ] as const) {
    it(`as root on ${system}: installs what is missing with apt-get, then finds it`, () => {
      const dir = binDir(others.filter((b) => b !== 'faketime'));
      const aptCalls = fakeAptGet(dir);
      const log: string[] = [];
      const result = ensureTools({ root, env: envOf(dir), uid: 0, osRelease, log: (l) => log.push(l) });
      expect(result).toEqual({ ok: true, installed: ['redis-server', 'faketime'] });
      expect(aptCalls()).toEqual(['update -qq', 'install -y -qq --no-install-recommends redis-server faketime']);
      expect(log.at(-2)).toBe('[test-tools] redis-server, faketime not on PATH: apt-get install -y redis-server faketime (root on a Debian-like system)');
      expect(log.at(-1)).toBe('[test-tools] installed redis-server faketime');
    });
  }

  it("as root on Debian: a Python module the tests' python3 does not find is installed with apt-get, then found", () => {
    const dir = binDir(TOOLS.map((t) => t.bin).filter((b) => b !== 'celery'));
    const aptCalls = fakeAptGet(dir);
    const result = ensureTools({ root, env: envOf(dir), uid: 0, osRelease: DEBIAN, log: () => {} });
    expect(result).toEqual({ ok: true, installed: ['python3-celery'] });
    expect(aptCalls()).toEqual(['update -qq', 'install -y -qq --no-install-recommends python3-celery']);
  });

  it('a python3 that does not run finds no module: the one line names them all', () => {
    const dir = binDir(TOOLS.filter((t) => !t.python).map((t) => t.bin));
    const result = ensureTools({ root, env: { PATH: dir, EDGE_LIMITER_PYTHON: join(dir, 'no-such-python') }, uid: 1000, osRelease: DEBIAN, log: () => {} });
    const modules = TOOLS.filter((t) => t.python);
    expect(result).toEqual({ ok: false, line: installLine(modules) });
    expect(!result.ok && result.line).toMatch(/^the tests need the Python modules aiohttp, celery, fastapi, httpx, mypy, pip, not found by \/usr\/bin\/python3: install them with `sudo apt-get install -y python3-aiohttp /);
  });

  it('as root on a system that is not Debian-like: the one line, apt-get not run', () => {
    const dir = binDir(others);
    const aptCalls = fakeAptGet(dir);
    const result = ensureTools({ root, env: envOf(dir), uid: 0, osRelease: FEDORA, log: () => {} });
    expect(result).toEqual({ ok: false, line: installLine(TOOLS.filter((t) => t.bin === 'redis-server')) });
    expect(aptCalls()).toEqual([]);
  });

  it('as root on Debian when apt-get fails: the one line, saying so', () => {
    const dir = binDir(others);
    const aptCalls = fakeAptGet(dir, 100);
    const result = ensureTools({ root, env: envOf(dir), uid: 0, osRelease: DEBIAN, log: () => {} });
    expect(result.ok).toBe(false);
    expect(!result.ok && result.line).toBe(
      'apt-get failed (exit 100: E: Unable to locate package); the tests need redis-server, not found on PATH: install it with `sudo apt-get install -y redis-server` (Debian/Ubuntu; npm test runs this itself when run as root) or `brew install redis` (macOS), then run npm test again',
    );
    expect(aptCalls()).toEqual(['update -qq']);
  });
});

describe('vitest alone, without npm test', () => {
  it('stops at once with the same line when redis-server is not on PATH', { timeout: 60_000 }, async () => {
    const vitest = join(root, 'node_modules/vitest/vitest.mjs');
    const { code, out } = await new Promise<{ code: number; out: string }>((resolve) =>
      execFile(process.execPath, [vitest, 'run', '--project', 'unit', 'test/reasons.test.ts'], { cwd: root, env: { PATH: binDir(others), HOME: tmpdir(), NO_COLOR: '1' } }, (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, out: stdout + stderr }),
      ),
    );
    expect(code).not.toBe(0);
    expect(out).toContain(installLine(TOOLS.filter((t) => t.bin === 'redis-server')));
  });

  it('no message says .ci/run installs anything (npm test does)', () => {
    for (const file of ['README.md', 'docs/development.md', 'scripts/lib/redis-server.ts', 'test/support/global-setup.ts']) {
      expect(readFileSync(join(root, file), 'utf8'), file).not.toMatch(/\.ci\/run installs/);
    }
  });
});

describe('.ci/run', () => {
  const ci = readFileSync(join(root, '.ci/run'), 'utf8');
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const commands = ci
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#') && !/^(set |cd )/.test(l));

  it("runs the README's test command, and installs nothing itself", () => {
    const first = /^```sh\n([\s\S]*?)```/m.exec(readme)?.[1] ?? '';
    const testCommand = /^(npm ci && npm test)\s/m.exec(first)?.[1];
    expect(testCommand).toBe('npm ci && npm test');
    expect(commands[0]).toBe(testCommand);
    for (const c of commands) expect(c).not.toMatch(/apt-get|brew /);
  });

  it('runs nothing else that the Tests section of docs/development.md does not say it runs', () => {
    const guide = readFileSync(join(root, 'docs/development.md'), 'utf8');
    const at = guide.indexOf('\n## Tests\n');
    expect(at).toBeGreaterThanOrEqual(0);
    const tests = guide.slice(at, guide.indexOf('\n## ', at + 1));
    for (const c of commands.slice(1)) expect(tests, `.ci/run runs ${c}; the Tests section of docs/development.md does not say so`).toContain(`\`${c}\``);
  });
});
