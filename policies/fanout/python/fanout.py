"""Runs a DataJob as N worker Pods: the Python ``fanout``, giving the same
answers as the Rust one (``policies/fanout``) for every golden case in
``policies/fanout/tests/golden``; its module documentation states the
behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from policyhost_sdk import (STRING, U32, Child, ChildPhase, Cleanup, Condition, Context, Event,
                            Field, InvalidParams, Job, ListOf, MapOf, Nullable, Params, Phase,
                            Policy, Reconcile, Status, Struct, log)
from policyhost_sdk.build import (AccessMode, BuildError, Container, PersistentVolumeClaim, Pod,
                                  PodTemplate, RestartPolicy, quoted)

MAX_REPLICAS = 1000
MAX_BACKOFF_LIMIT = 1000
CLEANUP_RETRY_MS = 2000
WORKERS_READY = "WorkersReady"
SCRATCH_VOLUME = "scratch"
SCRATCH_PATH = "/scratch"
JOB_LABEL = "fanout.policyhost.dev/job"


class Scratch(Params):
    size = Field(STRING)
    storage_class = Field(Nullable(STRING), default=None)


class FanoutParams(Params):
    replicas = Field(U32, default=1)
    image = Field(STRING)
    command = Field(ListOf(STRING), default=[])
    backoff_limit = Field(U32, default=3)
    pod_annotations = Field(MapOf(STRING), default={})
    scratch = Field(Nullable(Struct(Scratch)), default=None)

    def validate(self) -> None:
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise InvalidParams(
                f"params.replicas: {self.replicas} is out of range 1..={MAX_REPLICAS}")
        if self.backoff_limit > MAX_BACKOFF_LIMIT:
            raise InvalidParams(
                f"params.backoffLimit: {self.backoff_limit} is out of range 0..={MAX_BACKOFF_LIMIT}")
        if not self.image or any(c.isspace() for c in self.image):
            raise InvalidParams(f"params.image: {quoted(self.image)} is not an image reference")


def worker_name(job: str, index: int, retry: int) -> str:
    return f"{job}-worker-{index}" + (f"-r{retry}" if retry else "")


def _canonical(digits: str) -> Optional[int]:
    if digits and digits.isascii() and digits.isdigit() and not (len(digits) > 1 and digits[0] == "0"):
        return int(digits)
    return None


def parse_worker(job: str, name: str) -> Optional[tuple[int, int]]:
    """``(index, retry)`` of a worker name of this job, or None."""
    prefix = f"{job}-worker-"
    if not name.startswith(prefix):
        return None
    index_text, dash, retry_text = name[len(prefix):].partition("-")
    index = _canonical(index_text)
    if index is None:
        return None
    if not dash:
        return index, 0
    if not retry_text.startswith("r"):
        return None
    retry = _canonical(retry_text[1:])
    return (index, retry) if retry else None


@dataclass
class Slot:
    failed: list[int] = field(default_factory=list)
    succeeded: list[int] = field(default_factory=list)
    current: Optional[tuple[ChildPhase, bool]] = None

    @property
    def current_retry(self) -> int:
        return self.failed[-1] + 1 if self.failed else 0

    @property
    def is_done(self) -> bool:
        return bool(self.succeeded)


@dataclass
class Counts:
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0


def slots(job: str, replicas: int, children: Sequence[Child]) -> tuple[list[Slot], Counts]:
    result = [Slot() for _ in range(replicas)]
    counts = Counts()
    workers = []
    for child in children:
        parsed = parse_worker(job, child.name) if child.is_pod else None
        if parsed is not None and parsed[0] < replicas:
            workers.append((parsed[0], parsed[1], child))
    for index, retry, child in workers:
        name = child.phase.value
        setattr(counts, name, getattr(counts, name) + 1)
        if child.phase is ChildPhase.FAILED:
            result[index].failed.append(retry)
        elif child.phase is ChildPhase.SUCCEEDED:
            result[index].succeeded.append(retry)
    for slot in result:
        slot.failed.sort()
        slot.succeeded.sort()
    for index, retry, child in workers:
        slot = result[index]
        if not child.phase.is_finished and retry == slot.current_retry:
            slot.current = (child.phase, child.ready)
    return result, counts


def _running(slot: Slot) -> bool:
    return slot.current is not None and slot.current[0] is ChildPhase.RUNNING


def phase_of(all_slots: list[Slot], failures: int, backoff_limit: int) -> Phase:
    if failures > backoff_limit:
        return Phase.FAILED
    if all(slot.is_done for slot in all_slots):
        return Phase.SUCCEEDED
    if all(slot.is_done or _running(slot) for slot in all_slots):
        return Phase.RUNNING
    return Phase.PENDING


def workers(count: int) -> str:
    return "1 worker" if count == 1 else f"{count} workers"


class Fanout(Policy):
    params = FanoutParams

    def reconcile(self, job: Job, params: FanoutParams, children: Sequence[Child],
                  ctx: Context) -> Reconcile:
        params.validate()
        all_slots, counts = slots(job.name, params.replicas, children)
        failures = counts.failed
        phase = phase_of(all_slots, failures, params.backoff_limit)
        template = worker_template(job, params)
        desired = [] if params.scratch is None else [scratch_claim(job, params.scratch)]
        for index, slot in enumerate(all_slots):
            for retry in [*slot.failed, *slot.succeeded]:
                desired.append(worker(template, job, index, retry))
            if phase is not Phase.FAILED and not slot.is_done:
                desired.append(worker(template, job, index, slot.current_retry))
        outputs = {
            "phase": phase.value,
            "desired": params.replicas,
            "pending": counts.pending + counts.unknown,
            "running": counts.running,
            "succeeded": counts.succeeded,
            "failed": counts.failed,
        }
        previous = previous_outputs(job)
        status = Status(phase, message(phase, all_slots, failures, params),
                        [workers_ready(phase, all_slots)], outputs)
        return Reconcile(status, desired, events(previous, outputs, phase, params))

    def cleanup(self, job: Job, children: Sequence[Child], ctx: Context) -> Cleanup:
        return Cleanup.once_stopped(children, CLEANUP_RETRY_MS)


_OUTPUT_FIELDS = {"phase": str, "desired": int, "pending": int, "running": int,
                  "succeeded": int, "failed": int}


def previous_outputs(job: Job) -> Optional[dict]:
    """The outputs handed back, if they have this policy's shape."""
    value = job.previous_outputs()
    if not isinstance(value, dict):
        return None
    for key, kind in _OUTPUT_FIELDS.items():
        item = value.get(key)
        if not isinstance(item, kind) or isinstance(item, bool):
            return None
        if kind is int and not 0 <= item < 1 << 32:
            return None
    return value


def scratch_claim_name(job: Job) -> str:
    return f"{job.name}-scratch"


def worker_template(job: Job, params: FanoutParams) -> PodTemplate:
    container = Container("worker", params.image).command(params.command)
    pod = Pod("worker")
    for key, value in params.pod_annotations.items():
        pod.annotation(key, value)
    if params.scratch is not None:
        pod.volume_claim(SCRATCH_VOLUME, scratch_claim_name(job))
        container.mount(SCRATCH_VOLUME, SCRATCH_PATH)
    return (pod.label("app.kubernetes.io/name", "fanout-worker")
            .label(JOB_LABEL, job.name)
            .restart_policy(RestartPolicy.NEVER)
            .container(container)
            .template())


def scratch_claim(job: Job, scratch: Scratch):
    """The claim every worker mounts; what the builder refuses is a param's
    fault (the job's name was checked by the workers' template)."""
    claim = (PersistentVolumeClaim(scratch_claim_name(job)).label(JOB_LABEL, job.name)
             .storage(scratch.size).access_mode(AccessMode.READ_WRITE_MANY))
    if scratch.storage_class is not None:
        claim.storage_class(scratch.storage_class)
    try:
        return claim.build()
    except BuildError as error:
        raise InvalidParams(f"params.scratch: {error.message}") from None


def worker(template: PodTemplate, job: Job, index: int, retry: int):
    return (template.pod(worker_name(job.name, index, retry))
            .label("fanout.policyhost.dev/index", str(index))
            .label("fanout.policyhost.dev/retry", str(retry))
            .env("FANOUT_INDEX", str(index))
            .build())


def message(phase: Phase, all_slots: list[Slot], failures: int, params: FanoutParams) -> str:
    replicas = params.replicas
    done = sum(1 for slot in all_slots if slot.is_done)
    if phase is Phase.FAILED:
        return f"{failures} worker failures exceed backoffLimit {params.backoff_limit}"
    if phase is Phase.SUCCEEDED:
        return f"{replicas}/{replicas} workers succeeded"
    running = sum(1 for slot in all_slots if _running(slot))
    return f"{running}/{replicas} workers running, {done} succeeded, {failures} failed"


def workers_ready(phase: Phase, all_slots: list[Slot]) -> Condition:
    if phase is Phase.FAILED:
        return Condition(WORKERS_READY, False, "BackoffLimitExceeded",
                         "too many workers failed; no replacements are started")
    if phase is Phase.SUCCEEDED:
        return Condition(WORKERS_READY, False, "Completed", "all workers finished")
    unready = sum(1 for slot in all_slots
                  if not slot.is_done and slot.current != (ChildPhase.RUNNING, True))
    if unready == 0:
        return Condition(WORKERS_READY, True, "AllReady",
                         "every unfinished worker is running and ready")
    return Condition(WORKERS_READY, False, "WorkersNotReady",
                     f"{workers(unready)} not running and ready yet")


def events(previous: Optional[dict], now: dict, phase: Phase, params: FanoutParams) -> list[Event]:
    result = []
    previous_failed = previous.get("failed", 0) if previous else 0
    if now["failed"] > previous_failed:
        result.append(Event.warn("WorkerFailed", (
            f"{workers(now['failed'] - previous_failed)} failed "
            f"({now['failed']} in all, backoffLimit {params.backoff_limit})")))
    previous_phase = previous.get("phase", "") if previous else None
    if previous_phase != phase.value:
        log.info(f"phase {previous_phase if previous else '(none)'} -> {phase.value}")
        replicas = params.replicas
        if phase is Phase.PENDING and previous is None:
            result.append(Event.normal("Started", f"starting {workers(replicas)}"))
        elif phase is Phase.PENDING:
            result.append(Event.normal("Pending", "waiting for workers to start"))
        elif phase is Phase.RUNNING:
            result.append(Event.normal("Running", f"{workers(replicas)} running"))
        elif phase is Phase.SUCCEEDED:
            result.append(Event.normal("Succeeded", f"{workers(replicas)} succeeded"))
        else:
            result.append(Event.warn("BackoffLimitExceeded", (
                f"{now['failed']} worker failures exceed backoffLimit {params.backoff_limit}")))
    return result
