// A real headless browser for the live page test: Debian's chromium driven by playwright-core (no
// browser download). When it is missing, root on Debian installs it with apt-get; anywhere else the
// test fails with one line that names the command to run. CHROMIUM_PATH points at another binary.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

const DEBIAN_CHROMIUM = '/usr/bin/chromium';

export function ensureChromium(): string {
  const wanted = process.env.CHROMIUM_PATH;
  if (wanted) {
    if (!existsSync(wanted)) throw new Error(`CHROMIUM_PATH=${wanted} does not exist`);
    return wanted;
  }
  if (existsSync(DEBIAN_CHROMIUM)) return DEBIAN_CHROMIUM;
  const root = process.getuid?.() === 0;
  if (root && existsSync('/etc/debian_version')) {
    console.log('[chromium] not installed: apt-get install -y chromium');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    execFileSync('apt-get', ['install', '-y', '-qq', 'chromium'], { stdio: ['ignore', 'ignore', 'inherit'], env });
    if (existsSync(DEBIAN_CHROMIUM)) return DEBIAN_CHROMIUM;
  }
  throw new Error('The live page test needs chromium: run `sudo apt-get install -y chromium` (Debian/Ubuntu), or set CHROMIUM_PATH to a Chromium binary.');
}

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/** Headless chromium with a fresh profile directory, removed on close. */
export async function launchChromium(viewport = { width: 1280, height: 900 }): Promise<Browser> {
  const executablePath = ensureChromium();
  const profile = mkdtempSync(join(tmpdir(), 'edge-limiter-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
