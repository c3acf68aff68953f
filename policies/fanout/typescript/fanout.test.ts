import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { assertGoldenDir } from "@policyhost/sdk/testing";

import { fanout, parseWorker, workerName } from "./fanout.ts";

const golden = fileURLToPath(new URL("../tests/golden", import.meta.url));

test("every golden case of the Rust fanout", () => {
  assertGoldenDir(fanout, golden);
});

test("worker names round-trip and foreign names do not parse", () => {
  for (const [index, retry] of [[0, 0], [7, 0], [3, 1], [999, 12]]) {
    assert.deepEqual(parseWorker("job", workerName("job", index, retry)), [index, retry]);
  }
  for (const other of ["job", "job-worker-", "job-worker-x", "job-worker-01", "job-worker-1-r0",
    "job-worker-1-r", "other-worker-1", "job-worker-1-r02", "job-worker--1", "job-worker-١"]) {
    assert.equal(parseWorker("job", other), undefined, other);
  }
});
