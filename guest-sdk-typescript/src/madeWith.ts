/**
 * The `policyhost-sdk` custom section every component built with this SDK
 * carries: the language, this SDK's version and the world it targets, so
 * that a host refuses a policy built for a world it does not serve with a
 * reason naming both. `policyhost-ts build` appends it. Node only (it reads
 * this package's manifest): the CLI's, never a policy's.
 */

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The WIT world this SDK targets: the package of `wit/policy.wit`. */
export const WORLD = "policyhost:reconcile@0.1.0";

/** The section's name. */
export const SECTION = "policyhost-sdk";

/** This package's root: `dist/src/` is two levels below it. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** This SDK's version, from its `package.json`. */
export const VERSION: string = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version;

function leb128(n: number): number[] {
  const out: number[] = [];
  do {
    const byte = n & 0x7f;
    n >>>= 7;
    out.push(n ? byte | 0x80 : byte);
  } while (n);
  return out;
}

/** The custom section (id 0: its name, then the JSON) as bytes to append. */
export function section(language = "typescript", version = VERSION): Uint8Array {
  const name = new TextEncoder().encode(SECTION);
  const text = new TextEncoder().encode(JSON.stringify({ language, sdk: version, world: WORLD }));
  const payload = [...leb128(name.length), ...name, ...text];
  return Uint8Array.from([0, ...leb128(payload.length), ...payload]);
}
