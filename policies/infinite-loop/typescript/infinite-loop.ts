/** Loops forever in `reconcile` and `cleanup`: the host's deadline, or its
 * fuel, ends the call, as for the Rust `infinite-loop`. */

import type { Policy } from "@policyhost/sdk";

function spin(): never {
  let count = 0;
  for (;;) count += 1;
}

const infiniteLoop: Policy = { reconcile: () => spin(), cleanup: () => spin() };
export default infiniteLoop;
