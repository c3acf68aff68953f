/**
 * Golden cases, run natively under Node: the shared case format
 * (`policies/fanout/tests/golden/README.md`) is the contract between the
 * SDKs of every language and the host, which runs the same files through the
 * compiled component (`policyhost policy test`).
 *
 *     test("golden", () => assertGoldenDir(fanout, "../fanout/tests/golden"));
 *
 * `POLICYHOST_BLESS=1` rewrites each `expected` with what the policy answers.
 */

import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { isDeepStrictEqual } from "node:util";
import { join } from "node:path";

import type { Child, ChildPhase, Context, Job } from "./inputs.js";
import { type Policy, runCleanup, runReconcile } from "./policy.js";
import { PolicyError, cleanupJson, reconcileJson } from "./result.js";

/** A golden file that cannot be read, named with the reason. */
export class CaseError extends Error {}

type Json = any;

/** JSON text as the Rust harness and the host send it: compact, keys sorted. */
export function compact(value: Json): string {
  const sorted = (v: Json): Json =>
    Array.isArray(v)
      ? v.map(sorted)
      : v !== null && typeof v === "object"
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]))
        : v;
  return JSON.stringify(sorted(value));
}

const FIELDS = {
  case: ["description", "call", "job", "children", "context", "http", "expected"],
  job: ["name", "namespace", "uid", "generation", "labels", "annotations", "params", "status",
    "deletionUnixMs"],
  child: ["apiVersion", "kind", "name", "phase", "ready", "deleting", "labels"],
  context: ["nowUnixMs", "attempt", "policyDigest"],
};

function fields(what: keyof typeof FIELDS, value: Json): Record<string, Json> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new CaseError(`${what} must be an object`);
  }
  const unknown = Object.keys(value).filter((k) => !FIELDS[what].includes(k)).sort();
  if (unknown.length > 0) throw new CaseError(`${what} has unknown field \`${unknown[0]}\``);
  return value;
}

const sortedPairs = (map: Json): Record<string, string> =>
  Object.fromEntries(Object.entries(map ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) as Record<string, string>;

/** One golden case: a call's inputs and the result JSON expected. */
export class Golden {
  constructor(
    readonly call: "reconcile" | "cleanup",
    readonly job: Job,
    readonly children: Child[],
    readonly context: Context,
    readonly expected: Json,
    readonly document: Record<string, Json>,
  ) {}

  static fromJson(document: Json): Golden {
    document = fields("case", document);
    if (document.http?.length) throw new CaseError("cases with `http` exchanges are not supported natively in TypeScript");
    if (document.call !== "reconcile" && document.call !== "cleanup") {
      throw new CaseError(`call must be \`reconcile\` or \`cleanup\`, not ${JSON.stringify(document.call)}`);
    }
    if (!("expected" in document)) throw new CaseError("missing field `expected`");
    const job = fields("job", document.job);
    if (typeof job.name !== "string") throw new CaseError("job: missing field `name`");
    const ctx = fields("context", document.context ?? {});
    return new Golden(
      document.call,
      {
        name: job.name,
        namespace: job.namespace ?? "default",
        uid: job.uid ?? `uid-${job.name}`,
        generation: job.generation ?? 1,
        labels: sortedPairs(job.labels),
        annotations: sortedPairs(job.annotations),
        paramsJson: compact(job.params ?? {}),
        statusJson: job.status === null || job.status === undefined ? undefined : compact(job.status),
        deletionUnixMs: job.deletionUnixMs ?? undefined,
      },
      (document.children ?? []).map((raw: Json) => {
        const c = fields("child", raw);
        return {
          apiVersion: c.apiVersion ?? "v1",
          kind: c.kind ?? "Pod",
          name: c.name,
          phase: (c.phase ?? "pending") as ChildPhase,
          ready: c.ready ?? false,
          deleting: c.deleting ?? false,
          labels: sortedPairs(c.labels),
        };
      }),
      {
        nowUnixMs: ctx.nowUnixMs ?? 1_700_000_000_000,
        attempt: ctx.attempt ?? 1,
        policyDigest: ctx.policyDigest ?? "native",
      },
      document.expected,
      document,
    );
  }

  static load(path: string): Golden {
    try {
      return Golden.fromJson(JSON.parse(readFileSync(path, "utf8")));
    } catch (error) {
      throw new CaseError(`${path}: ${(error as Error).message}`);
    }
  }

  /** The result JSON the policy answers. */
  run<P>(policy: Policy<P>): Json {
    try {
      return this.call === "reconcile"
        ? reconcileJson(runReconcile(policy, this.job, this.children, this.context))
        : cleanupJson(runCleanup(policy, this.job, this.children, this.context));
    } catch (error) {
      if (error instanceof PolicyError) return error.toJson();
      throw error;
    }
  }
}

/** Runs every `*.json` case of `dir`; throws listing every mismatch (or, with
 * `POLICYHOST_BLESS=1`, rewrites them). */
export function assertGoldenDir<P>(policy: Policy<P>, dir: string): void {
  const paths = readdirSync(dir).filter((f) => f.endsWith(".json")).sort().map((f) => join(dir, f));
  if (paths.length === 0) throw new Error(`no golden files in ${dir}`);
  const bless = process.env.POLICYHOST_BLESS === "1";
  const mismatches: string[] = [];
  for (const path of paths) {
    const golden = Golden.load(path);
    const actual = golden.run(policy);
    if (isDeepStrictEqual(actual, golden.expected)) continue;
    if (bless) {
      golden.document.expected = actual;
      writeFileSync(path, JSON.stringify(golden.document, null, 2) + "\n");
    } else {
      mismatches.push(`${path}:\n  expected: ${compact(golden.expected)}\n  actual:   ${compact(actual)}`);
    }
  }
  if (mismatches.length > 0) {
    throw new Error(`golden mismatches (POLICYHOST_BLESS=1 rewrites them):\n${mismatches.join("\n")}`);
  }
}
