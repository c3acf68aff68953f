/** Recurses without end: the engine's stack check, or the WebAssembly
 * stack, ends the call in a trap or an error of its own, and the host
 * survives, as for the Rust `deep-recursion`. */

import type { Policy } from "@policyhost/sdk";

function dive(depth: number): number {
  return dive(depth + 1) + 1;
}

const deepRecursion: Policy = {
  reconcile: () => {
    dive(0);
    throw new Error("unreachable");
  },
};
export default deepRecursion;
