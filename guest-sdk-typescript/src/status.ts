/**
 * Helpers for the status most policies report: children counted by phase,
 * the DataJob's phase from them, and an Event when the phase changes. The
 * same helpers, with the same words, as the Rust SDK's `status` module.
 */

import type { Child, ChildPhase } from "./inputs.js";
import type { Event, Phase } from "./result.js";

/** Children counted by phase, and how many are ready. */
export class ChildCounts {
  pending = 0;
  running = 0;
  succeeded = 0;
  failed = 0;
  unknown = 0;
  ready = 0;

  static of(children: Iterable<Child>): ChildCounts {
    const counts = new ChildCounts();
    for (const child of children) counts.add(child.phase, child.ready);
    return counts;
  }

  add(phase: ChildPhase, ready: boolean): void {
    this[phase] += 1;
    if (ready) this.ready += 1;
  }

  get total(): number {
    return this.pending + this.running + this.succeeded + this.failed + this.unknown;
  }

  /** Pending or running. */
  get active(): number {
    return this.pending + this.running;
  }

  allSucceeded(desired: number): boolean {
    return this.succeeded >= desired;
  }

  /** `Failed` past `allowedFailures`, `Succeeded` once `desired` succeeded,
   * `Running` once that many run or succeeded, else `Pending`. */
  phase(desired: number, allowedFailures: number): Phase {
    if (this.failed > allowedFailures) return "Failed";
    if (this.allSucceeded(desired)) return "Succeeded";
    if (this.running + this.succeeded >= desired) return "Running";
    return "Pending";
  }
}

/** The Event for a change of phase (a Warning into `Failed`), or undefined. */
export function phaseChange(previous: Phase | undefined, now: Phase): Event | undefined {
  if (previous === now) return undefined;
  const message =
    previous === undefined ? `phase is ${now}` : `phase changed from ${previous} to ${now}`;
  return { warning: now === "Failed", reason: now, message };
}

/** `3/5 workers`. */
export const progress = (done: number, of: number, what: string): string => `${done}/${of} ${what}`;
