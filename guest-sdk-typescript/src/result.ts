/**
 * What a policy returns, and the result JSON every SDK and the host agree
 * on (`policies/fanout/tests/golden/README.md`).
 */

import { type Child, isActive, runs } from "./inputs.js";

/** The DataJob's conventional phases. */
export type Phase = "Pending" | "Running" | "Succeeded" | "Failed";

/** A failure the policy reports itself; the host retries it with backoff. */
export class PolicyError extends Error {
  readonly kind: "failed" | "invalidParams" = "failed";
  toJson(): Record<string, string> {
    return { [this.kind]: this.message };
  }
}

/** `spec.params` do not fit the policy's schema; the message names the field. */
export class InvalidParams extends PolicyError {
  override readonly kind = "invalidParams" as const;
}

/** A child the policy wants to exist; the builders make these. */
export interface DesiredChild {
  apiVersion: string;
  kind: string;
  name: string;
  /** The manifest as JSON text. */
  manifest: string;
}

/** A child from a manifest object, its identity read from the manifest. */
export function fromManifest(manifest: Record<string, any>): DesiredChild {
  return {
    apiVersion: String(manifest.apiVersion ?? ""),
    kind: String(manifest.kind ?? ""),
    name: String(manifest.metadata?.name ?? ""),
    manifest: JSON.stringify(manifest),
  };
}

/** A status condition of the DataJob, owned by the policy. */
export interface Condition {
  type: string;
  status: boolean;
  reason: string;
  message: string;
}

/** The status the policy reports; `outputs` comes back as `previousOutputs(job)`. */
export interface Status {
  phase: Phase | string;
  message: string;
  conditions: Condition[];
  outputs: unknown;
}

/** A Kubernetes Event the host records on the DataJob. */
export interface Event {
  warning: boolean;
  reason: string;
  message: string;
}

export const normalEvent = (reason: string, message: string): Event => ({
  warning: false,
  reason,
  message,
});

export const warningEvent = (reason: string, message: string): Event => ({
  warning: true,
  reason,
  message,
});

/** What `reconcile` wants to be true: the complete desired set of children
 * (owned children not in it are deleted), the status, events, and an
 * optional call-me-again delay. */
export interface Reconcile {
  children: DesiredChild[];
  status: Status;
  events: Event[];
  requeueAfterMs?: number;
}

/** What `cleanup` reports: done (no `retryAfterMs`), or not yet. */
export interface Cleanup {
  retryAfterMs?: number;
}

/** Done once no child that runs (`runs`) is pending or running, else retry after `retryMs`. */
export function onceStopped(children: readonly Child[], retryMs: number): Cleanup {
  return children.some((child) => runs(child) && isActive(child.phase))
    ? { retryAfterMs: retryMs }
    : {};
}

/** The result JSON of a reconcile result. */
export function reconcileJson(result: Reconcile): Record<string, unknown> {
  const json: Record<string, unknown> = {
    children: result.children.map((c) => ({
      apiVersion: c.apiVersion,
      kind: c.kind,
      name: c.name,
      manifest: JSON.parse(c.manifest),
    })),
    status: {
      phase: result.status.phase,
      message: result.status.message,
      conditions: result.status.conditions.map((c) => ({
        type: c.type,
        status: c.status ? "True" : "False",
        reason: c.reason,
        message: c.message,
      })),
      outputs: JSON.parse(JSON.stringify(result.status.outputs ?? {})),
    },
  };
  if (result.requeueAfterMs !== undefined) json.requeueAfterMs = result.requeueAfterMs;
  json.events = result.events.map((e) => ({
    type: e.warning ? "Warning" : "Normal",
    reason: e.reason,
    message: e.message,
  }));
  return json;
}

/** The result JSON of a cleanup result. */
export function cleanupJson(result: Cleanup): Record<string, unknown> {
  return result.retryAfterMs === undefined
    ? { result: "done" }
    : { result: "retryAfter", retryAfterMs: result.retryAfterMs };
}
