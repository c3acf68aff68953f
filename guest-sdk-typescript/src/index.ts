/**
 * Write policyhost DataJob policies in TypeScript and build them into
 * WebAssembly components of the `datajob-policy` world. A policy is a pure
 * function of the DataJob, its children and the context; the host runs
 * every call in a fresh, capped instance. See `docs/policies.md`.
 */

export * from "./inputs.js";
export * from "./result.js";
export * from "./params.js";
export * from "./policy.js";
export * as build from "./build.js";
export * as log from "./log.js";
export * as names from "./names.js";
export * as status from "./status.js";
