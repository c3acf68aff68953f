"""Helpers for the status most policies report: children counted by phase,
the DataJob's phase from them, and an Event when the phase changes. The
same helpers, with the same words, as the Rust SDK's ``status`` module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from .inputs import Child, ChildPhase
from .result import Event, Phase


@dataclass
class ChildCounts:
    """Children counted by phase, and how many are ready."""

    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    ready: int = 0

    @classmethod
    def of(cls, children: Iterable[Child]) -> "ChildCounts":
        counts = cls()
        for child in children:
            counts.add(child.phase, child.ready)
        return counts

    def add(self, phase: ChildPhase, ready: bool) -> None:
        setattr(self, phase.value, getattr(self, phase.value) + 1)
        self.ready += int(ready)

    @property
    def total(self) -> int:
        return self.pending + self.running + self.succeeded + self.failed + self.unknown

    @property
    def active(self) -> int:
        """Pending or running."""
        return self.pending + self.running

    def all_succeeded(self, desired: int) -> bool:
        return self.succeeded >= desired

    def phase(self, desired: int, allowed_failures: int) -> Phase:
        """``Failed`` past ``allowed_failures``, ``Succeeded`` once
        ``desired`` succeeded, ``Running`` once that many run or succeeded,
        else ``Pending``."""
        if self.failed > allowed_failures:
            return Phase.FAILED
        if self.all_succeeded(desired):
            return Phase.SUCCEEDED
        if self.running + self.succeeded >= desired:
            return Phase.RUNNING
        return Phase.PENDING


def phase_change(previous: Optional[Phase], now: Phase) -> Optional[Event]:
    """The Event for a change of phase (a Warning into ``Failed``), or None."""
    if previous is now:
        return None
    message = f"phase is {now}" if previous is None else f"phase changed from {previous} to {now}"
    return Event(now is Phase.FAILED, now.value, message)


def progress(done: int, of: int, what: str) -> str:
    """``3/5 workers``."""
    return f"{done}/{of} {what}"
