import { defineConfig } from 'vitest/config';

// Two projects: `unit` (fast, parallel) and `load` (multi-process contention, faults, soak), which
// run one file at a time after `unit`, so their CPU load cannot disturb the timing assertions of others.
const LOAD = ['test/load/**/*.test.ts'];

export default defineConfig({
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: LOAD, maxWorkers: 2 } },
      { extends: true, test: { name: 'load', include: LOAD, maxWorkers: 1, testTimeout: 120_000 } },
    ],
  },
});
