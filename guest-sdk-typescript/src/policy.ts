/** The `Policy` interface and the two calls every SDK makes the same way. */

import type { Child, Context, Job } from "./inputs.js";
import type { ParamsSchema } from "./params.js";
import { type Cleanup, type Reconcile, InvalidParams, onceStopped } from "./result.js";

/** How long the default cleanup waits while children still run. */
export const CLEANUP_RETRY_MS = 2000;

/**
 * A DataJob policy: a pure function of the job, its children and the
 * context. `params` reads `spec.params` (without one, `reconcile` gets the
 * raw JSON value); `cleanup`, if left out, is done once no child is pending
 * or running. Throw `InvalidParams` or `PolicyError` to report a failure.
 */
export interface Policy<P = unknown> {
  readonly params?: ParamsSchema<P>;
  reconcile(job: Job, params: P, children: readonly Child[], ctx: Context): Reconcile;
  cleanup?(job: Job, children: readonly Child[], ctx: Context): Cleanup;
}

function rawParams(text: string): unknown {
  try {
    return text.trim() === "" ? {} : JSON.parse(text);
  } catch (error) {
    throw new InvalidParams(`params: ${(error as Error).message}`);
  }
}

/** Reads the params with the policy's schema, then calls `reconcile`. */
export function runReconcile<P>(
  policy: Policy<P>,
  job: Job,
  children: readonly Child[],
  ctx: Context,
): Reconcile {
  const params = policy.params ? policy.params.parse(job.paramsJson) : (rawParams(job.paramsJson) as P);
  return policy.reconcile(job, params, children, ctx);
}

/** Calls `cleanup`: params are not read, so bad params never block a deletion. */
export function runCleanup<P>(
  policy: Policy<P>,
  job: Job,
  children: readonly Child[],
  ctx: Context,
): Cleanup {
  return policy.cleanup
    ? policy.cleanup(job, children, ctx)
    : onceStopped(children, CLEANUP_RETRY_MS);
}
