/**
 * The bridge between a `Policy` and the WIT world `datajob-policy`, as
 * jco/componentize-js binds it: `exportPolicy(policy)` gives the
 * `reconcile` and `cleanup` exports. Only the component build imports this
 * module (`policyhost:reconcile/*` exists only inside a component).
 */

// @ts-ignore: resolved by componentize-js from the WIT world.
import { log as hostLog } from "policyhost:reconcile/host@0.1.0";
import type * as wit from "policyhost:reconcile/types@0.1.0";

import type { Child, Context, Job } from "./inputs.js";
import { setSink } from "./log.js";
import { type Policy, runCleanup, runReconcile } from "./policy.js";
import { type Cleanup, type Reconcile, InvalidParams, PolicyError } from "./result.js";

const pairs = (list: wit.KeyValue[]): Record<string, string> =>
  Object.fromEntries(list.map((kv) => [kv.key, kv.value]));

const toJob = (job: wit.DataJob): Job => ({
  name: job.name,
  namespace: job.namespace,
  uid: job.uid,
  generation: Number(job.generation),
  labels: pairs(job.labels),
  annotations: pairs(job.annotations),
  paramsJson: job.params,
  statusJson: job.status,
  deletionUnixMs: job.deletionUnixMs === undefined ? undefined : Number(job.deletionUnixMs),
});

const toChildren = (children: wit.Child[]): Child[] =>
  children.map((c) => ({ ...c, labels: pairs(c.labels) }));

const toContext = (ctx: wit.Context): Context => ({
  nowUnixMs: Number(ctx.nowUnixMs),
  attempt: ctx.attempt,
  policyDigest: ctx.policyDigest,
});

const toReconcile = (result: Reconcile): wit.ReconcileResult => ({
  children: result.children.map((c) => ({ ...c })),
  status: {
    phase: result.status.phase,
    message: result.status.message,
    conditions: result.status.conditions.map((c) => ({
      kind: c.type,
      status: c.status,
      reason: c.reason,
      message: c.message,
    })),
    outputs: JSON.stringify(result.status.outputs ?? {}),
  },
  requeueAfterMs: result.requeueAfterMs === undefined ? undefined : BigInt(result.requeueAfterMs),
  events: result.events.map((e) => ({ ...e })),
});

const toCleanup = (result: Cleanup): wit.CleanupResult =>
  result.retryAfterMs === undefined
    ? { tag: "done" }
    : { tag: "retry-after-ms", val: BigInt(result.retryAfterMs) };

/** A policy error as the err payload of the export's result. */
function toError(error: unknown): wit.PolicyError {
  if (error instanceof InvalidParams) return { tag: "invalid-params", val: error.message };
  if (error instanceof PolicyError) return { tag: "failed", val: error.message };
  throw error;
}

/** The `reconcile` and `cleanup` exports for `policy`. */
export function exportPolicy<P>(policy: Policy<P>) {
  setSink((level, message) => hostLog(level, message));
  return {
    reconcile(job: wit.DataJob, children: wit.Child[], ctx: wit.Context): wit.ReconcileResult {
      try {
        return toReconcile(runReconcile(policy, toJob(job), toChildren(children), toContext(ctx)));
      } catch (error) {
        throw toError(error);
      }
    },
    cleanup(job: wit.DataJob, children: wit.Child[], ctx: wit.Context): wit.CleanupResult {
      try {
        return toCleanup(runCleanup(policy, toJob(job), toChildren(children), toContext(ctx)));
      } catch (error) {
        throw toError(error);
      }
    },
  };
}
