#!/usr/bin/env node
/**
 * `policyhost-ts`: builds a TypeScript policy into a WebAssembly component,
 * and runs its tests.
 *
 *     policyhost-ts build fanout.ts --export fanout -o fanout.wasm
 *     policyhost-ts test            # every *.test.ts here, under node --test
 *
 * `build` bundles the module with esbuild (the SDK included), then
 * componentizes the bundle with componentize-qjs against the WIT world this
 * package carries: QuickJS, snapshotted after the module is evaluated, and
 * its synchronous runtime (the world's exports are synchronous).
 */

import { spawnSync } from "node:child_process";
import { appendFileSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { ROOT as SDK, section } from "./madeWith.js";

const WIT = join(SDK, "wit", "policy.wit");
const WORLD = "datajob-policy";

/**
 * A tool this package depends on: in its own `node_modules` (a checkout),
 * else where npm put it beside the package (`node_modules/.bin`, two levels
 * up from `node_modules/@policyhost/sdk`).
 */
function bin(name: string): string {
  const candidates = [join(SDK, "node_modules", ".bin", name), join(SDK, "..", "..", ".bin", name)];
  return candidates.find((path) => existsSync(path)) ?? candidates[0];
}

class UsageError extends Error {}

function run(command: string, args: string[]): void {
  const done = spawnSync(command, args, { stdio: ["ignore", "inherit", "inherit"] });
  if (done.error) throw new Error(`${command}: ${done.error.message}`);
  if (done.status !== 0) throw new Error(`${command} ${args[0] ?? ""} failed (exit ${done.status})`);
}

/** Bundles `entry` (its imports and the SDK) into one ES module. */
function bundle(entry: string, out: string, external: string[]): void {
  run(bin("esbuild"), [
    entry,
    "--bundle",
    "--format=esm",
    "--platform=neutral",
    "--log-level=warning",
    `--alias:@policyhost/sdk=${join(SDK, "dist", "src")}`,
    ...external.map((e) => `--external:${e}`),
    `--outfile=${out}`,
  ]);
}

function build(args: string[]): void {
  const [source, ...rest] = args;
  const option = (name: string, fallback?: string): string => {
    const at = rest.indexOf(name);
    const value = at >= 0 ? rest[at + 1] : fallback;
    if (value === undefined) throw new UsageError(`build needs ${name}`);
    return value;
  };
  if (!source) throw new UsageError("build needs the policy's module, e.g. fanout.ts");
  const name = option("--export", "default");
  const output = resolve(option("-o"));
  const scratch = mkdtempSync(join(tmpdir(), "policyhost-ts-"));
  try {
    const entry = join(scratch, "entry.js");
    const policy = name === "default" ? "policy" : `{ ${name} as policy }`;
    writeFileSync(
      entry,
      `import ${policy} from ${JSON.stringify(resolve(source))};\n` +
        `import { exportPolicy } from ${JSON.stringify(join(SDK, "dist", "src", "component.js"))};\n` +
        "const exported = exportPolicy(policy);\n" +
        "export function reconcile(job, children, ctx) { return exported.reconcile(job, children, ctx); }\n" +
        "export function cleanup(job, children, ctx) { return exported.cleanup(job, children, ctx); }\n",
    );
    const bundled = join(scratch, "policy.js");
    bundle(entry, bundled, ["policyhost:*", "wasi:*"]);
    run(bin("componentize-qjs"), ["--wit", WIT, "--js", bundled, "--world", WORLD, "--sync", "-o", output]);
    appendFileSync(output, section());
    console.log(`built ${output} (${statSync(output).size} bytes)`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Bundles every `*.test.ts` of the directory and runs them with node's test
 * runner. Each bundle is written beside its source (and removed after), so
 * that `import.meta.url` finds the files the test reads.
 */
function test(args: string[]): void {
  const dir = resolve(args[0] ?? ".");
  const tests = readdirSync(dir).filter((f) => f.endsWith(".test.ts")).sort();
  if (tests.length === 0) throw new UsageError(`no *.test.ts in ${dir}`);
  const bundles = tests.map((file) => join(dir, `.${file.replace(/\.ts$/, "")}.bundle.mjs`));
  try {
    tests.forEach((file, i) => bundle(join(dir, file), bundles[i], ["node:*"]));
    run(process.execPath, ["--test", ...bundles]);
  } finally {
    for (const out of bundles) rmSync(out, { force: true });
  }
}

function main(argv: string[]): number {
  const [command, ...args] = argv;
  try {
    if (command === "build") build(args);
    else if (command === "test") test(args);
    else throw new UsageError(`unknown command ${JSON.stringify(command ?? "")}`);
    return 0;
  } catch (error) {
    console.error(`policyhost-ts: ${(error as Error).message}`);
    if (error instanceof UsageError) {
      console.error("usage: policyhost-ts build MODULE.ts [--export NAME] -o OUT.wasm | policyhost-ts test [DIR]");
    }
    return error instanceof UsageError ? 2 : 1;
  }
}

process.exit(main(process.argv.slice(2)));
