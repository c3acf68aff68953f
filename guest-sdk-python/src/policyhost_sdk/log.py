"""Log lines to the host's log, tagged with the policy and the DataJob.

Inside a component they go through the WIT ``host.log`` import (bounded in
size and number per call by the host); natively, to the records a test can
read (:data:`RECORDS`).
"""

from __future__ import annotations

import enum
from typing import Callable, Optional


class Level(enum.Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


RECORDS: list[tuple[Level, str]] = []
"""Lines logged outside a component, oldest first."""

_sink: Optional[Callable[[Level, str], None]] = None


def set_sink(sink: Optional[Callable[[Level, str], None]]) -> None:
    """Where lines go: the component bridge sets the host import."""
    global _sink
    _sink = sink


def log(level: Level, message: str) -> None:
    if _sink is not None:
        _sink(level, message)
    else:
        RECORDS.append((level, message))


def trace(message: str) -> None:
    log(Level.TRACE, message)


def debug(message: str) -> None:
    log(Level.DEBUG, message)


def info(message: str) -> None:
    log(Level.INFO, message)


def warn(message: str) -> None:
    log(Level.WARN, message)


def error(message: str) -> None:
    log(Level.ERROR, message)
