// The window check of the reservation properties (test/reservations-change.test.ts,
// test/reservations-several.test.ts, test/mongodb-reservations.test.ts): admissions counted when they
// are due (a reservation at its slot, as its caller proceeds then), on each limit by the tokens they
// charged it, against the numbers in force over time.
import type { OverrideLimit } from '../../src/store.js';

/** An admission: when it is due (exact µs, fractional, from the run's origin), the tokens it charged each limit, and the segment of numbers it was decided under. */
export interface Admission {
  dueUs: number;
  costs: readonly number[];
  under: number;
}

/** Numbers in force from startUs (from the run's origin) until the next segment's start. */
export interface Segment {
  startUs: number;
  numbers: readonly OverrideLimit[];
}

/**
 * The first window that breaks the rule, said in words; undefined when none does. For each segment from
 * `fromSegment` on and each limit: every window that starts at or after the segment's start, holds an
 * admission decided under it that charged the limit, and none decided under a later segment, holds no
 * more tokens of the limit than its capacity plus its refill over the window. A window that admissions
 * decided before fill on their own (numbers lowered since: reservations keep their times) is not this
 * rule's. With `lagUs`, each window also has the refill of lagUs more: admissions counted when their
 * callers come (whole ms after the decision, core CALLER_LAG_US), up to that long after their slots.
 */
export function overWindow(admitted: readonly Admission[], segments: readonly Segment[], fromSegment = 1, lagUs = 0): string | undefined {
  const sorted = [...admitted].sort((a, b) => a.dueUs - b.dueUs);
  for (let k = fromSegment; k < segments.length; k++) {
    const { startUs, numbers } = segments[k]!;
    for (let li = 0; li < numbers.length; li++) {
      const l = numbers[li]!;
      for (let i = 0; i < sorted.length; i++) {
        if (sorted[i]!.dueUs < startUs) continue;
        let tokens = 0;
        let mine = false;
        for (let j = i; j < sorted.length; j++) {
          const a = sorted[j]!;
          if (a.under > k) break;
          tokens += a.costs[li]!;
          if (a.under === k && a.costs[li]! > 0) mine = true;
          const allowedUnits = l.capacityUnits + (a.dueUs - sorted[i]!.dueUs + lagUs) * l.refillUnitsPerUs;
          if (mine && tokens * l.tokenUnits > allowedUnits + 1e-6 * l.tokenUnits) {
            return `limit ${li} over in segment ${k}: ${tokens} tokens due from ${sorted[i]!.dueUs - startUs} to ${a.dueUs - startUs} µs after it began, where ${allowedUnits / l.tokenUnits} are allowed`;
          }
        }
      }
    }
  }
  return undefined;
}

/** The segment in force at sinceUs (from the run's origin): the last that has started. */
export function segmentAt(segments: readonly Segment[] | readonly { startUs: number }[], sinceUs: number): number {
  let k = 0;
  while (k + 1 < segments.length && segments[k + 1]!.startUs <= sinceUs) k++;
  return k;
}

/**
 * How long after its decision an admission is due (exact µs, fractional): when every limit it charged
 * has refilled to its capacity in the numbers it was decided under, from the debts the store reported.
 */
export function dueAfterUs(costs: readonly number[], debtUnits: readonly number[], numbers: readonly OverrideLimit[]): number {
  let waitUs = 0;
  numbers.forEach((l, i) => {
    if (costs[i]! > 0) waitUs = Math.max(waitUs, (debtUnits[i]! - l.capacityUnits) / l.refillUnitsPerUs);
  });
  return waitUs;
}
