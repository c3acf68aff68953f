/**
 * Log lines to the host's log, tagged with the policy and the DataJob.
 * Inside a component they go through the WIT `host.log` import (bounded per
 * call by the host); natively, to `records`, which a test can read.
 */

export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** Lines logged outside a component, oldest first. */
export const records: [Level, string][] = [];

let sink: ((level: Level, message: string) => void) | undefined;

/** Where lines go: the component bridge sets the host import. */
export function setSink(to: ((level: Level, message: string) => void) | undefined): void {
  sink = to;
}

export function log(level: Level, message: string): void {
  if (sink) sink(level, message);
  else records.push([level, message]);
}

export const trace = (message: string) => log("trace", message);
export const debug = (message: string) => log("debug", message);
export const info = (message: string) => log("info", message);
export const warn = (message: string) => log("warn", message);
export const error = (message: string) => log("error", message);
