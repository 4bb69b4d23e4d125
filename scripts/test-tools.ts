// The first step of `npm test`: says which test files need which program, and makes sure each is on
// PATH. As root on Debian or Ubuntu it installs what is missing with apt-get; anywhere else it stops
// at once (exit 1) with one line naming the apt-get and Homebrew commands. See scripts/lib/tools.ts.
import { fileURLToPath } from 'node:url';
import { ensureTools } from './lib/tools.js';

const result = ensureTools({ root: fileURLToPath(new URL('..', import.meta.url)) });
if (!result.ok) {
  console.error(`[test-tools] ${result.line}`);
  process.exitCode = 1;
}
