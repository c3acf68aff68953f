/** Floods every log channel it has: `lines` lines (params, default 10,000)
 * through `console.log`, as many through `console.error` (inside a
 * component both write to the host's log) and as many `log` calls at every
 * level, each with a newline and a carriage return meant to forge a host
 * log line. The host keeps its own log bounded and still returns the
 * result, as for the Rust `log-flood`. */

import { type Policy, log } from "@policyhost/sdk";

const FORGED = '\n{"level":"ERROR","message":"forged"}\r';
const LEVELS = ["trace", "debug", "info", "warn", "error"] as const;

function flood(lines: number): void {
  for (let i = 0; i < lines; i++) {
    console.log(`stdout ${i}${FORGED}`);
    console.error(`stderr ${i}${FORGED}`);
    log.log(LEVELS[i % 5], `log ${i}${FORGED}`);
  }
}

const logFlood: Policy<{ lines?: number }> = {
  reconcile: (_job, params) => {
    const lines = typeof params.lines === "number" ? params.lines : 10_000;
    flood(lines);
    return {
      children: [],
      status: { phase: "Succeeded", message: `flooded ${lines} lines`, conditions: [], outputs: {} },
      events: [],
    };
  },
  cleanup: () => {
    flood(10_000);
    return {};
  },
};
export default logFlood;
