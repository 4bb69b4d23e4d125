// The ids of policy-wide records (core/override.ts): each a store clock reading in whole µs, its
// version, before a '.'; a change's or a revert's id then names the version of the record it replaced and
// since when the policy's own numbers were in force up to it (priorOf); a marker's id is its version alone.
import type { OverrideRecord } from './override-types.js';

/**
 * What a policy-wide record's id says of the record it replaced, after its version
 * ("<version>.<prevUs>.<baseUs>.<id>", written by applyOverride): prevUs, that record's version (0:
 * none), and baseUs, the store clock's reading from which the policy's own numbers were in force up to
 * this version (the version itself when the record replaced had numbers in force then). Undefined for
 * an id without them (a marker a step writes, or a record written before they were).
 */
export function priorOf(id: string | undefined): [prevUs: number, baseUs: number] | undefined {
  const m = id === undefined ? null : /^\d{1,16}\.(\d{1,16})\.(\d{1,16})\./.exec(id);
  return m === null ? undefined : [Number(m[1]), Number(m[2])];
}

/**
 * A policy-wide change's version, from its id: the store clock's reading, in whole µs, when
 * Store.override made it (at least one above the change it replaced), written before a '.'. A marker
 * (see isMarker) is the reading that found no change. 0 for an id without one.
 */
export function changeVersion(id: string | undefined): number {
  if (id === undefined) return 0;
  const dot = id.indexOf('.');
  return dot > 0 && dot < 17 && /^\d+$/.test(id.slice(0, dot)) ? Number(id.slice(0, dot)) : 0;
}

/**
 * Whether a key's copy of a policy-wide change (or marker) of id `policyId` is newer than a node's view:
 * the change it sees (a version above that change's), or with none the version of the record it read
 * (at or above it; a node with no view at all, seenUs 0, is the oldest). A newer copy decides the key's
 * steps and stays (recordForStep).
 */
export function newerThanView(policyId: string, change: { readonly id: string } | undefined, seenUs: number): boolean {
  const v = changeVersion(policyId);
  return change !== undefined ? v > changeVersion(change.id) : v >= seenUs;
}

/**
 * Whether the record is a marker: a policy-wide id and no numbers. A step whose node last read the
 * policy-wide record at version R with no change in force (a revert's marker, or a change that has
 * ended) leaves one (id "R.") where it takes a key's copy of an older change away, so that a node whose
 * view is older cannot install that change again; a key's copy of a change that ends becomes the marker
 * of that change. A newer change replaces it. It sets no numbers (the bucket is in the base's) and, like
 * a copy, goes with its bucket once its hold has passed (keepUntilUs).
 */
export function isMarker(record: OverrideRecord | undefined): boolean {
  return record !== undefined && record.limits === undefined && record.policyId !== undefined;
}
