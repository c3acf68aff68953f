"""What a call hands the policy: the DataJob, its children and the context.

The same records as the WIT world's ``data-job``, ``child`` and
``context``, as plain Python values.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Optional


class ChildPhase(enum.Enum):
    """The lifecycle phase of a child, as the host reads it from its status."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"

    @property
    def is_active(self) -> bool:
        """Pending or running: the child still works."""
        return self in (ChildPhase.PENDING, ChildPhase.RUNNING)

    @property
    def is_finished(self) -> bool:
        """Succeeded or failed."""
        return self in (ChildPhase.SUCCEEDED, ChildPhase.FAILED)


@dataclass(frozen=True)
class Job:
    """The DataJob being reconciled or cleaned up, as the host's cache holds it.

    ``labels`` and ``annotations`` are dicts; ``params_json`` is
    ``spec.params`` as JSON text (read it with a :class:`~policyhost_sdk.Params`
    class), ``status_json`` the ``status.outputs`` the host last wrote.
    """

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    params_json: str = "{}"
    status_json: Optional[str] = None
    deletion_unix_ms: Optional[int] = None

    def previous_outputs(self) -> Optional[Any]:
        """The outputs the host handed back (the last ``Status.outputs``),
        or ``None`` if there are none or they are not JSON."""
        if self.status_json is None:
            return None
        try:
            return json.loads(self.status_json)
        except ValueError:
            return None

    @property
    def is_deleting(self) -> bool:
        """True during cleanup."""
        return self.deletion_unix_ms is not None


@dataclass(frozen=True)
class Child:
    """A child the host owns for this DataJob, from its owner index."""

    name: str
    api_version: str = "v1"
    kind: str = "Pod"
    phase: ChildPhase = ChildPhase.PENDING
    ready: bool = False
    deleting: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    def is_(self, api_version: str, kind: str) -> bool:
        """Whether the child is of this API version and kind."""
        return self.api_version == api_version and self.kind == kind

    @property
    def is_pod(self) -> bool:
        """Whether the child is a ``v1`` Pod."""
        return self.is_("v1", "Pod")

    @property
    def runs(self) -> bool:
        """Whether the child runs and stops: a Pod or a batch Job. A claim,
        a ConfigMap or a Service only exists (an unbound claim stays
        pending on a cluster that provisions none)."""
        return self.is_pod or self.is_("batch/v1", "Job")


@dataclass(frozen=True)
class Context:
    """Facts about the call a pure function cannot find out itself."""

    now_unix_ms: int = 1_700_000_000_000
    attempt: int = 1
    policy_digest: str = "native"
