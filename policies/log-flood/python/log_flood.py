"""Floods every log channel it has: ``lines`` lines (params, default
10,000) to stdout, as many to stderr and as many ``log`` calls at every
level, each with a newline and a carriage return meant to forge a host log
line. The host keeps its own log bounded and still returns the result, as
for the Rust ``log-flood``."""

import sys

from policyhost_sdk import U32, Cleanup, Field, Params, Phase, Policy, Reconcile, Status, log

FORGED = "\n{\"level\":\"ERROR\",\"message\":\"forged\"}\r"


class LogFloodParams(Params):
    lines = Field(U32, default=10_000)


def flood(lines):
    for i in range(lines):
        print(f"stdout {i}{FORGED}")
        print(f"stderr {i}{FORGED}", file=sys.stderr)
        log.log(log.Level(i % 5), f"log {i}{FORGED}")


class LogFlood(Policy):
    params = LogFloodParams

    def reconcile(self, job, params, children, ctx):
        flood(params.lines)
        return Reconcile(Status(Phase.SUCCEEDED, f"flooded {params.lines} lines"))

    def cleanup(self, job, children, ctx):
        flood(10_000)
        return Cleanup.done()
