/**
 * The cases every SDK agrees on: name rules (`names/cases.json`), builders
 * (`guest-sdk/builders.json`) and params (`guest-sdk/params.json`), whose
 * expectations the Rust SDK wrote.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as build from "../src/build.js";
import { RULES } from "../src/names.js";
import { boolean, field, listOf, mapOf, nullable, params, string, u32 } from "../src/params.js";
import { InvalidParams } from "../src/result.js";

const shared = (path: string) =>
  JSON.parse(readFileSync(new URL(`../../../${path}`, import.meta.url), "utf8"));

test("every name rule agrees with the shared cases", () => {
  const cases = shared("names/cases.json").rules as Record<string, { text: string; reason: string | null }[]>;
  assert.deepEqual(Object.keys(RULES).sort(), Object.keys(cases).sort());
  for (const [rule, list] of Object.entries(cases)) {
    for (const { text, reason } of list) {
      assert.equal(RULES[rule](text) ?? null, reason, `${rule}(${JSON.stringify(text)})`);
    }
  }
});

type Call = [string, ...any[]];
const camel = (name: string) => name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

function apply<B>(builder: B, calls: Call[]): B {
  for (const [method, ...args] of calls) {
    const values =
      method === "container"
        ? [apply(new build.Container(args[0].name, args[0].image), args[0].calls)]
        : args;
    (builder as any)[camel(method)](...values);
  }
  return builder;
}

function make(c: any) {
  if (c.builder === "PodTemplate") {
    const template = apply(new build.Pod(c.name), c.calls).template();
    return apply(template.pod(c.pod.name), c.pod.calls).build();
  }
  const Builder = (build as any)[c.builder];
  return apply(new Builder(c.name), c.calls).build();
}

for (const c of shared("guest-sdk/builders.json").cases) {
  test(`builders: ${c.description}`, () => {
    let actual;
    try {
      actual = { manifest: JSON.parse(make(c).manifest) };
    } catch (error) {
      if (!(error instanceof build.BuildError)) throw error;
      actual = { error: error.message };
    }
    assert.deepEqual(actual, c.expected);
  });
}

const Limit = params("Limit", { cpu: field(string) });

const Example = params("Example", {
  replicas: field(u32),
  backoffLimit: field(u32, 0),
  names: field(listOf(string), []),
  labels: field(mapOf(string), {}),
  verbose: field(nullable(boolean), undefined),
  limit: field(nullable(Limit), undefined),
});

test("params are read or refused as the Rust SDK does", () => {
  for (const c of shared("guest-sdk/params.json").cases) {
    let refusal: string | null = null;
    try {
      Example.parse(c.params);
    } catch (error) {
      if (!(error instanceof InvalidParams)) throw error;
      refusal = error.message;
    }
    assert.equal(refusal, c.refusal, c.params);
  }
});

test("params defaults are fresh per parse", () => {
  Example.parse('{"replicas": 1}').names.push("x");
  assert.deepEqual(Example.parse('{"replicas": 1}').names, []);
  assert.equal(Example.parse('{"replicas": 1}').verbose, undefined, "a nullable field defaults to undefined");
});
