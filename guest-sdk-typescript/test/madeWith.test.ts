import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { ROOT, SECTION, VERSION, WORLD, section } from "../src/madeWith.js";

function uleb(data: Uint8Array, at: number): [number, number] {
  let value = 0;
  let shift = 0;
  for (;;) {
    const byte = data[at++];
    value |= (byte & 0x7f) << shift;
    shift += 7;
    if (!(byte & 0x80)) return [value, at];
  }
}

test("the section is a custom section naming the language, this version and the world", () => {
  const bytes = section();
  assert.equal(bytes[0], 0);
  const [size, start] = uleb(bytes, 1);
  assert.equal(bytes.length, start + size);
  const [nameLength, at] = uleb(bytes, start);
  assert.equal(new TextDecoder().decode(bytes.slice(at, at + nameLength)), SECTION);
  const text = JSON.parse(new TextDecoder().decode(bytes.slice(at + nameLength)));
  assert.deepEqual(text, { language: "typescript", sdk: VERSION, world: WORLD });
  assert.equal(VERSION, JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version);
});

test("the world is the package of the WIT file the SDK carries", () => {
  const wit = readFileSync(join(ROOT, "wit", "policy.wit"), "utf8");
  assert.ok(wit.split("\n").includes(`package ${WORLD};`));
});

test("a long section takes a multi-byte size", () => {
  const bytes = section("typescript", "0.1.0+" + "x".repeat(200));
  const [size, at] = uleb(bytes, 1);
  assert.equal(at, 3);
  assert.equal(bytes.length, at + size);
});
