/**
 * Waits `ms` milliseconds (params `{"ms": 5000}` by default) the only way a
 * synchronous JavaScript function can: a loop until `Date.now()` has moved
 * by `ms`. The host's clocks are virtual and move only when a policy waits
 * through WASI, so the loop never sees time pass: the call ends at its
 * deadline with `DeadlineExceeded` whatever `ms` is, and holds no thread past it.
 */

import type { Policy } from "@policyhost/sdk";

function waitFor(ms: number): never {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    // the virtual clock does not move
  }
  throw new Error(`waited ${ms} ms`);
}

const sleeper: Policy<{ ms: number }> = {
  reconcile: (_job, params) => waitFor(typeof params.ms === "number" ? params.ms : 5000),
  cleanup: () => waitFor(5000),
};
export default sleeper;
