"""Sleeps ``ms`` milliseconds (params ``{"ms": 5000}`` by default) with
``time.sleep``, which CPython turns into a WASI clock subscription and a
wait. The host's clocks are virtual: within the deadline the call returns
at once and ``time`` moved by exactly the sleep (outputs ``sleptMs`` and
``nowMs``); past it, the call ends at once with ``DeadlineExceeded``. As for
the Rust ``sleeper``."""

import time

from policyhost_sdk import U64, Cleanup, Field, Params, Phase, Policy, Reconcile, Status


class SleeperParams(Params):
    ms = Field(U64, default=5000)


class Sleeper(Policy):
    params = SleeperParams

    def reconcile(self, job, params, children, ctx):
        time.sleep(params.ms / 1000)
        outputs = {"sleptMs": params.ms, "nowMs": time.time_ns() // 1_000_000}
        return Reconcile(Status(Phase.SUCCEEDED, "slept", outputs=outputs))

    def cleanup(self, job, children, ctx):
        time.sleep(5)
        return Cleanup.done()
