/**
 * `onceStopped` waits for what runs (Pods and batch Jobs) and never for a
 * claim, which only exists: an unbound one stays pending on a cluster that
 * provisions none.
 */

import assert from "node:assert/strict";
import test from "node:test";

import { type Child, type ChildPhase, onceStopped } from "../src/index.js";

const child = (apiVersion: string, kind: string, phase: ChildPhase): Child => ({
  apiVersion,
  kind,
  name: kind.toLowerCase(),
  phase,
  ready: false,
  deleting: false,
  labels: {},
});

test("a pending claim does not hold the cleanup, a running Pod or a pending Job does", () => {
  const claim = child("v1", "PersistentVolumeClaim", "pending");
  assert.deepEqual(onceStopped([claim, child("v1", "Pod", "succeeded")], 2000), {});
  assert.deepEqual(onceStopped([claim, child("v1", "Pod", "running")], 2000), {
    retryAfterMs: 2000,
  });
  assert.deepEqual(onceStopped([child("batch/v1", "Job", "pending")], 2000), {
    retryAfterMs: 2000,
  });
});
