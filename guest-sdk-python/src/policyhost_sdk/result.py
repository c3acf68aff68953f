"""What a policy returns, and the result JSON every SDK and the host agree
on (``policies/fanout/tests/golden/README.md``)."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

from .inputs import Child


class Phase(enum.Enum):
    """The DataJob's conventional phases."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    def __str__(self) -> str:
        return self.value


class PolicyError(Exception):
    """A failure the policy reports itself: raise it from ``reconcile`` or
    ``cleanup``. The host retries a failure with backoff."""

    kind = "failed"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_json(self) -> dict[str, str]:
        """The result JSON of the error."""
        return {self.kind: self.message}


class InvalidParams(PolicyError):
    """``spec.params`` do not fit the policy's schema; the message names the
    field. Retrying does not help until the spec changes."""

    kind = "invalidParams"


def manifest_text(value: Any) -> str:
    """``value`` as a manifest's JSON text: compact, not ASCII-escaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class DesiredChild:
    """A child the policy wants to exist: its identity and manifest (JSON
    text). The builders in :mod:`policyhost_sdk.build` make these."""

    api_version: str
    kind: str
    name: str
    manifest: str

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> "DesiredChild":
        """A child from a manifest dict, its identity read from the manifest."""
        metadata = manifest.get("metadata") or {}
        return cls(
            api_version=str(manifest.get("apiVersion", "")),
            kind=str(manifest.get("kind", "")),
            name=str(metadata.get("name", "")),
            manifest=manifest_text(manifest),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "manifest": json.loads(self.manifest),
        }


@dataclass(frozen=True)
class Condition:
    """A status condition of the DataJob, owned by the policy."""

    type: str
    status: bool
    reason: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
        }


@dataclass
class Status:
    """The status the policy reports. ``outputs`` is any JSON value (an
    object by convention); it comes back as ``Job.previous_outputs()``."""

    phase: Union[Phase, str]
    message: str = ""
    conditions: list[Condition] = field(default_factory=list)
    outputs: Any = field(default_factory=dict)

    def outputs_json(self) -> str:
        """``outputs`` as the compact JSON text the host stores."""
        return json.dumps(self.outputs, separators=(",", ":"), ensure_ascii=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": str(self.phase),
            "message": self.message,
            "conditions": [c.to_json() for c in self.conditions],
            "outputs": json.loads(self.outputs_json()),
        }


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event the host records on the DataJob."""

    warning: bool
    reason: str
    message: str

    @classmethod
    def normal(cls, reason: str, message: str) -> "Event":
        return cls(False, reason, message)

    @classmethod
    def warn(cls, reason: str, message: str) -> "Event":
        return cls(True, reason, message)

    def to_json(self) -> dict[str, str]:
        return {
            "type": "Warning" if self.warning else "Normal",
            "reason": self.reason,
            "message": self.message,
        }


@dataclass
class Reconcile:
    """What ``reconcile`` wants to be true: the complete desired set of
    children (owned children not in it are deleted), the status, events,
    and an optional call-me-again delay."""

    status: Status
    children: list[DesiredChild] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after_ms: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "children": [c.to_json() for c in self.children],
            "status": self.status.to_json(),
        }
        if self.requeue_after_ms is not None:
            result["requeueAfterMs"] = self.requeue_after_ms
        result["events"] = [e.to_json() for e in self.events]
        return result


@dataclass(frozen=True)
class Cleanup:
    """What ``cleanup`` reports: done (``retry_after_ms`` None), or not yet."""

    retry_after_ms: Optional[int] = None

    @classmethod
    def done(cls) -> "Cleanup":
        return cls(None)

    @classmethod
    def retry_after(cls, ms: int) -> "Cleanup":
        return cls(ms)

    @classmethod
    def once_stopped(cls, children: Iterable[Child], retry_ms: int) -> "Cleanup":
        """Done once no child that runs (``Child.runs``) is pending or
        running, else retry after ``retry_ms``."""
        if any(child.runs and child.phase.is_active for child in children):
            return cls(retry_ms)
        return cls(None)

    def to_json(self) -> dict[str, Any]:
        if self.retry_after_ms is None:
            return {"result": "done"}
        return {"result": "retryAfter", "retryAfterMs": self.retry_after_ms}
