import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Timing assertions bracket real store time; keep files from starving each other on 2 cores.
    maxWorkers: 2,
  },
});
