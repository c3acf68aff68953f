/**
 * Runs a DataJob as N worker Pods: the TypeScript `fanout`, giving the same
 * answers as the Rust one (`policies/fanout`, whose module documentation
 * states the behaviour) for every golden case in `policies/fanout/tests/golden`.
 */

import {
  type Child,
  type ChildPhase,
  type Cleanup,
  type Condition,
  type Context,
  type Event,
  type Job,
  type Phase,
  type Policy,
  type Reconcile,
  build,
  field,
  isFinished,
  isPod,
  listOf,
  log,
  mapOf,
  normalEvent,
  nullable,
  onceStopped,
  params,
  previousOutputs,
  string,
  u32,
  warningEvent,
  InvalidParams,
} from "@policyhost/sdk";

export const MAX_REPLICAS = 1000;
export const MAX_BACKOFF_LIMIT = 1000;
export const CLEANUP_RETRY_MS = 2000;
export const WORKERS_READY = "WorkersReady";
export const SCRATCH_VOLUME = "scratch";
export const SCRATCH_PATH = "/scratch";
const JOB_LABEL = "fanout.policyhost.dev/job";

const Scratch = params("Scratch", {
  size: field(string),
  storageClass: field(nullable(string), undefined),
});

export const FanoutParams = params("Params", {
  replicas: field(u32, 1),
  image: field(string),
  command: field(listOf(string), []),
  backoffLimit: field(u32, 3),
  podAnnotations: field(mapOf(string), {}),
  scratch: field(nullable(Scratch), undefined),
});
type Params = ReturnType<typeof FanoutParams.parse>;

function validate(p: Params): void {
  if (p.replicas < 1 || p.replicas > MAX_REPLICAS) {
    throw new InvalidParams(`params.replicas: ${p.replicas} is out of range 1..=${MAX_REPLICAS}`);
  }
  if (p.backoffLimit > MAX_BACKOFF_LIMIT) {
    throw new InvalidParams(
      `params.backoffLimit: ${p.backoffLimit} is out of range 0..=${MAX_BACKOFF_LIMIT}`,
    );
  }
  if (p.image === "" || /\s/u.test(p.image)) {
    throw new InvalidParams(`params.image: ${build.quoted(p.image)} is not an image reference`);
  }
}

export const workerName = (job: string, index: number, retry: number): string =>
  `${job}-worker-${index}${retry ? `-r${retry}` : ""}`;

const canonical = (digits: string): number | undefined =>
  /^(0|[1-9][0-9]*)$/.test(digits) && digits.length <= 10 && Number(digits) < 2 ** 32
    ? Number(digits)
    : undefined;

/** `[index, retry]` of a worker name of this job, or undefined. */
export function parseWorker(job: string, name: string): [number, number] | undefined {
  const prefix = `${job}-worker-`;
  if (!name.startsWith(prefix)) return undefined;
  const rest = name.slice(prefix.length);
  const dash = rest.indexOf("-");
  const index = canonical(dash < 0 ? rest : rest.slice(0, dash));
  if (index === undefined) return undefined;
  if (dash < 0) return [index, 0];
  const retryText = rest.slice(dash + 1);
  if (!retryText.startsWith("r")) return undefined;
  const retry = canonical(retryText.slice(1));
  return retry ? [index, retry] : undefined;
}

interface Slot {
  failed: number[];
  succeeded: number[];
  current?: [ChildPhase, boolean];
}

const currentRetry = (slot: Slot): number =>
  slot.failed.length > 0 ? slot.failed[slot.failed.length - 1] + 1 : 0;
const isDone = (slot: Slot): boolean => slot.succeeded.length > 0;
const isRunning = (slot: Slot): boolean => slot.current?.[0] === "running";

type Counts = Record<ChildPhase, number>;

function slotsOf(job: string, replicas: number, children: readonly Child[]): [Slot[], Counts] {
  const slots: Slot[] = Array.from({ length: replicas }, () => ({ failed: [], succeeded: [] }));
  const counts: Counts = { pending: 0, running: 0, succeeded: 0, failed: 0, unknown: 0 };
  const workers: [number, number, Child][] = [];
  for (const child of children) {
    const parsed = isPod(child) ? parseWorker(job, child.name) : undefined;
    if (parsed && parsed[0] < replicas) workers.push([parsed[0], parsed[1], child]);
  }
  for (const [index, retry, child] of workers) {
    counts[child.phase] += 1;
    if (child.phase === "failed") slots[index].failed.push(retry);
    else if (child.phase === "succeeded") slots[index].succeeded.push(retry);
  }
  for (const slot of slots) {
    slot.failed.sort((a, b) => a - b);
    slot.succeeded.sort((a, b) => a - b);
  }
  for (const [index, retry, child] of workers) {
    const slot = slots[index];
    if (!isFinished(child.phase) && retry === currentRetry(slot)) {
      slot.current = [child.phase, child.ready];
    }
  }
  return [slots, counts];
}

function phaseOf(slots: Slot[], failures: number, backoffLimit: number): Phase {
  if (failures > backoffLimit) return "Failed";
  if (slots.every(isDone)) return "Succeeded";
  if (slots.every((s) => isDone(s) || isRunning(s))) return "Running";
  return "Pending";
}

const workers = (count: number): string => (count === 1 ? "1 worker" : `${count} workers`);

interface Outputs {
  phase: string;
  desired: number;
  pending: number;
  running: number;
  succeeded: number;
  failed: number;
}

/** The outputs handed back, if they have this policy's shape. */
function previous(job: Job): Outputs | undefined {
  const value = previousOutputs(job) as Record<string, unknown> | undefined;
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  if (typeof value.phase !== "string") return undefined;
  for (const key of ["desired", "pending", "running", "succeeded", "failed"]) {
    const n = value[key];
    if (typeof n !== "number" || !Number.isInteger(n) || n < 0 || n >= 2 ** 32) return undefined;
  }
  return value as unknown as Outputs;
}

const scratchClaimName = (job: Job): string => `${job.name}-scratch`;

function template(job: Job, p: Params): build.PodTemplate {
  const pod = new build.Pod("worker");
  const container = new build.Container("worker", p.image).command(p.command);
  for (const [key, value] of Object.entries(p.podAnnotations)) pod.annotation(key, value);
  if (p.scratch !== undefined) {
    pod.volumeClaim(SCRATCH_VOLUME, scratchClaimName(job));
    container.mount(SCRATCH_VOLUME, SCRATCH_PATH);
  }
  return pod
    .label("app.kubernetes.io/name", "fanout-worker")
    .label(JOB_LABEL, job.name)
    .restartPolicy("Never")
    .container(container)
    .template();
}

/** The claim every worker mounts; what the builder refuses is a param's
 * fault (the job's name was checked by the workers' template). */
function scratchClaim(job: Job, scratch: NonNullable<Params["scratch"]>) {
  const claim = new build.PersistentVolumeClaim(scratchClaimName(job))
    .label(JOB_LABEL, job.name)
    .storage(scratch.size)
    .accessMode("ReadWriteMany");
  if (scratch.storageClass !== undefined) claim.storageClass(scratch.storageClass);
  try {
    return claim.build();
  } catch (error) {
    if (error instanceof build.BuildError) throw new InvalidParams(`params.scratch: ${error.message}`);
    throw error;
  }
}

const worker = (t: build.PodTemplate, job: Job, index: number, retry: number) =>
  t
    .pod(workerName(job.name, index, retry))
    .label("fanout.policyhost.dev/index", String(index))
    .label("fanout.policyhost.dev/retry", String(retry))
    .env("FANOUT_INDEX", String(index))
    .build();

function message(phase: Phase, slots: Slot[], failures: number, p: Params): string {
  const done = slots.filter(isDone).length;
  if (phase === "Failed") return `${failures} worker failures exceed backoffLimit ${p.backoffLimit}`;
  if (phase === "Succeeded") return `${p.replicas}/${p.replicas} workers succeeded`;
  const running = slots.filter(isRunning).length;
  return `${running}/${p.replicas} workers running, ${done} succeeded, ${failures} failed`;
}

function workersReady(phase: Phase, slots: Slot[]): Condition {
  const condition = (status: boolean, reason: string, message: string): Condition => ({
    type: WORKERS_READY,
    status,
    reason,
    message,
  });
  if (phase === "Failed") {
    return condition(false, "BackoffLimitExceeded", "too many workers failed; no replacements are started");
  }
  if (phase === "Succeeded") return condition(false, "Completed", "all workers finished");
  const unready = slots.filter(
    (s) => !isDone(s) && !(s.current?.[0] === "running" && s.current[1]),
  ).length;
  return unready === 0
    ? condition(true, "AllReady", "every unfinished worker is running and ready")
    : condition(false, "WorkersNotReady", `${workers(unready)} not running and ready yet`);
}

function events(before: Outputs | undefined, now: Outputs, phase: Phase, p: Params): Event[] {
  const result: Event[] = [];
  const failedBefore = before?.failed ?? 0;
  if (now.failed > failedBefore) {
    result.push(
      warningEvent(
        "WorkerFailed",
        `${workers(now.failed - failedBefore)} failed (${now.failed} in all, backoffLimit ${p.backoffLimit})`,
      ),
    );
  }
  if (before?.phase !== phase) {
    log.info(`phase ${before?.phase ?? "(none)"} -> ${phase}`);
    const all = workers(p.replicas);
    if (phase === "Pending" && before === undefined) result.push(normalEvent("Started", `starting ${all}`));
    else if (phase === "Pending") result.push(normalEvent("Pending", "waiting for workers to start"));
    else if (phase === "Running") result.push(normalEvent("Running", `${all} running`));
    else if (phase === "Succeeded") result.push(normalEvent("Succeeded", `${all} succeeded`));
    else {
      result.push(
        warningEvent(
          "BackoffLimitExceeded",
          `${now.failed} worker failures exceed backoffLimit ${p.backoffLimit}`,
        ),
      );
    }
  }
  return result;
}

export const fanout: Policy<Params> = {
  params: FanoutParams,

  reconcile(job: Job, p: Params, children: readonly Child[], _ctx: Context): Reconcile {
    validate(p);
    const [slots, counts] = slotsOf(job.name, p.replicas, children);
    const failures = counts.failed;
    const phase = phaseOf(slots, failures, p.backoffLimit);
    const t = template(job, p);
    const desired = p.scratch === undefined ? [] : [scratchClaim(job, p.scratch)];
    for (const [index, slot] of slots.entries()) {
      for (const retry of [...slot.failed, ...slot.succeeded]) desired.push(worker(t, job, index, retry));
      if (phase !== "Failed" && !isDone(slot)) desired.push(worker(t, job, index, currentRetry(slot)));
    }
    const outputs: Outputs = {
      phase,
      desired: p.replicas,
      pending: counts.pending + counts.unknown,
      running: counts.running,
      succeeded: counts.succeeded,
      failed: counts.failed,
    };
    return {
      children: desired,
      status: {
        phase,
        message: message(phase, slots, failures, p),
        conditions: [workersReady(phase, slots)],
        outputs,
      },
      events: events(previous(job), outputs, phase, p),
    };
  },

  cleanup(_job: Job, children: readonly Child[], _ctx: Context): Cleanup {
    return onceStopped(children, CLEANUP_RETRY_MS);
  },
};

export default fanout;
