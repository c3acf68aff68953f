/** Allocates 1 MiB at a time, and touches it, until memory runs out: the
 * host's cap stops the linear memory, as for the Rust `memory-hog`. */

import type { Policy } from "@policyhost/sdk";

function hoard(): never {
  const kept: Uint8Array[] = [];
  for (;;) kept.push(new Uint8Array(1 << 20).fill(120));
}

const memoryHog: Policy = { reconcile: () => hoard(), cleanup: () => hoard() };
export default memoryHog;
