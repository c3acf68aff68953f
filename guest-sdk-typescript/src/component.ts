/**
 * The bridge between a `Policy` and the WIT world `datajob-policy`, as
 * componentize-qjs binds it: `exportPolicy(policy)` gives the `reconcile`
 * and `cleanup` exports. Only the component build imports this module
 * (`policyhost:reconcile/*` exists only inside a component).
 */

import * as host from "policyhost:reconcile/host@0.1.0";
import type * as types from "policyhost:reconcile/types@0.1.0";

import type { Child, Context, Job } from "./inputs.js";
import { type Level, log, setSink } from "./log.js";
import { type Policy, runCleanup, runReconcile } from "./policy.js";
import { type Cleanup, type Reconcile, InvalidParams, PolicyError } from "./result.js";

/**
 * A WIT type as componentize-qjs binds it, from the type jco generates:
 * QuickJS takes a `u64` as a number (exact to 2^53, beyond any time or
 * generation here) where jco says bigint, and `none` as null where jco says
 * undefined.
 */
type Qjs<T> = T extends bigint
  ? number
  : T extends (infer U)[]
    ? Qjs<U>[]
    : T extends object
      ? { [K in keyof T]-?: undefined extends T[K] ? Qjs<Exclude<T[K], undefined>> | null : Qjs<T[K]> }
      : T;

/** The world's types, as this bridge receives and returns them. */
declare namespace wit {
  type KeyValue = types.KeyValue;
  type DataJob = Qjs<types.DataJob>;
  type Child = Qjs<types.Child>;
  type Context = Qjs<types.Context>;
  type ReconcileResult = Qjs<types.ReconcileResult>;
  type CleanupResult = Qjs<types.CleanupResult>;
  type PolicyError = types.PolicyError;
}

const pairs = (list: wit.KeyValue[]): Record<string, string> =>
  Object.fromEntries(list.map((kv) => [kv.key, kv.value]));

const toJob = (job: wit.DataJob): Job => ({
  name: job.name,
  namespace: job.namespace,
  uid: job.uid,
  generation: job.generation,
  labels: pairs(job.labels),
  annotations: pairs(job.annotations),
  paramsJson: job.params,
  statusJson: job.status ?? undefined,
  deletionUnixMs: job.deletionUnixMs ?? undefined,
});

const toChildren = (children: wit.Child[]): Child[] =>
  children.map((c) => ({ ...c, labels: pairs(c.labels) }));

const toContext = (ctx: wit.Context): Context => ({
  nowUnixMs: ctx.nowUnixMs,
  attempt: ctx.attempt,
  policyDigest: ctx.policyDigest,
});

const toReconcile = (result: Reconcile): wit.ReconcileResult => ({
  children: result.children,
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
  requeueAfterMs: result.requeueAfterMs ?? null,
  events: result.events,
});

const toCleanup = (result: Cleanup): wit.CleanupResult =>
  result.retryAfterMs === undefined
    ? { tag: "done" }
    : { tag: "retry-after-ms", val: result.retryAfterMs };

/** A policy error as the err payload of the export's result. */
function toError(error: unknown): wit.PolicyError {
  if (error instanceof InvalidParams) return { tag: "invalid-params", val: error.message };
  if (error instanceof PolicyError) return { tag: "failed", val: error.message };
  throw error;
}

/** A value of a `console` call as a log line shows it. */
function shown(value: unknown): string {
  if (typeof value === "string") return value;
  if (value instanceof Error) return value.stack ? `${value}\n${value.stack}` : String(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * QuickJS has no `console`: inside a component each of its methods writes
 * one line to the host's log at its level (`log` and `info` at info), the
 * arguments joined by spaces, bounded per call as every log line is.
 */
function installConsole(): void {
  const at =
    (level: Level) =>
    (...values: unknown[]) =>
      log(level, values.map(shown).join(" "));
  const methods = { log: at("info"), info: at("info"), debug: at("debug"), trace: at("trace") };
  Object.assign(globalThis, { console: { ...methods, warn: at("warn"), error: at("error") } });
}

/** The `reconcile` and `cleanup` exports for `policy`. */
export function exportPolicy<P>(policy: Policy<P>) {
  setSink((level, message) => host.log(level, message));
  installConsole();
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
