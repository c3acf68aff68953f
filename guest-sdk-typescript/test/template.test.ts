/**
 * A `PodTemplate` writes each Pod's manifest from text cut once: the text
 * must be what `Pod.build` writes for the same Pod, byte for byte, whatever
 * the template holds (text that looks like the template's own marks
 * included).
 */

import assert from "node:assert/strict";
import test from "node:test";

import { build } from "../src/index.js";

type Vars = [string, string][];

/** A Pod with `labels`, `annotations` and one container per `images`, each with `vars`. */
function pod(name: string, labels: Vars, annotations: Vars, images: [string, Vars][]): build.Pod {
  const pod = new build.Pod(name).serviceAccount("runner").activeDeadlineSeconds(60);
  for (const [key, value] of labels) pod.label(key, value);
  for (const [key, value] of annotations) pod.annotation(key, value);
  images.forEach(([image, vars], i) => {
    const container = new build.Container(`c${i}`, image).command(["sh", "-c", image]);
    for (const [key, value] of vars) container.env(key, value);
    pod.container(container.request("cpu", "100m"));
  });
  return pod;
}

const mark = '","\u0000hole 0","\u0000hole 1';

const templates: [string, Vars, Vars, [string, Vars][]][] = [
  ["bare", [], [], [["busybox", []]]],
  ["labelled", [["app", "demo"], ["tier", "a"]], [["note", "x"]], [["busybox", [["MODE", "x"]]]]],
  ["two containers", [["app", "demo"]], [], [["busybox", [["MODE", "x"]]], ["side", []]]],
  ["marks in its text", [["app", "demo"]], [["note", mark]], [[mark, [["MODE", mark]]]]],
];

const own: [Vars, Vars][] = [
  [[], []],
  [[["index", "2"]], [["INDEX", "2"]]],
  [[["tier", "b"], ["index", "2"]], [["MODE", "y"], ["INDEX", "2"]]],
];

for (const [description, labels, annotations, images] of templates) {
  test(`a template's Pods are written as Pod.build writes them: ${description}`, () => {
    const template = pod("worker", labels, annotations, images).template();
    for (const [podLabels, podVars] of own) {
      const one = template.pod("demo-worker-2");
      for (const [key, value] of podLabels) one.label(key, value);
      for (const [key, value] of podVars) one.env(key, value);
      // The same Pod, built whole: its own labels and variables over the template's.
      const whole = pod(
        "demo-worker-2",
        [...new Map([...labels, ...podLabels])],
        annotations,
        images.map(([image, vars]) => [image, [...new Map([...vars, ...podVars])]]),
      ).build();
      assert.deepEqual(one.build(), whole);
    }
  });
}
