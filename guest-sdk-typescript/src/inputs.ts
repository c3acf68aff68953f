/**
 * What a call hands the policy: the DataJob, its children and the context,
 * the WIT world's `data-job`, `child` and `context` as plain values
 * (numbers, not bigints: milliseconds and generations fit in 2^53).
 */

export type ChildPhase = "pending" | "running" | "succeeded" | "failed" | "unknown";

/** Pending or running: the child still works. */
export const isActive = (phase: ChildPhase): boolean => phase === "pending" || phase === "running";

/**
 * Whether a child runs and stops: a Pod or a batch Job. A claim, a ConfigMap
 * or a Service only exists (an unbound claim stays pending on a cluster that
 * provisions none).
 */
export const runs = (child: { apiVersion: string; kind: string }): boolean =>
  (child.apiVersion === "v1" && child.kind === "Pod") ||
  (child.apiVersion === "batch/v1" && child.kind === "Job");

/** Succeeded or failed. */
export const isFinished = (phase: ChildPhase): boolean =>
  phase === "succeeded" || phase === "failed";

/** The DataJob being reconciled or cleaned up, as the host's cache holds it. */
export interface Job {
  name: string;
  namespace: string;
  uid: string;
  generation: number;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** `spec.params` as JSON text: read it with a `Params` schema. */
  paramsJson: string;
  /** The `status.outputs` the host last wrote, as JSON text. */
  statusJson?: string;
  /** Set during cleanup. */
  deletionUnixMs?: number;
}

/** The outputs the host handed back, or undefined if none or not JSON. */
export function previousOutputs(job: Job): unknown {
  if (job.statusJson === undefined) return undefined;
  try {
    return JSON.parse(job.statusJson);
  } catch {
    return undefined;
  }
}

/** A child the host owns for this DataJob, from its owner index. */
export interface Child {
  apiVersion: string;
  kind: string;
  name: string;
  phase: ChildPhase;
  ready: boolean;
  deleting: boolean;
  labels: Record<string, string>;
}

/** Whether the child is a `v1` Pod. */
export const isPod = (child: Child): boolean => child.apiVersion === "v1" && child.kind === "Pod";

/** Facts about the call a pure function cannot find out itself. */
export interface Context {
  nowUnixMs: number;
  attempt: number;
  policyDigest: string;
}
