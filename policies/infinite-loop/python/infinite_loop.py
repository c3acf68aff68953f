"""Loops forever in ``reconcile`` and ``cleanup``: the host's deadline, or
its fuel, ends the call, as for the Rust ``infinite-loop``."""

from policyhost_sdk import Policy


def spin():
    count = 0
    while True:
        count += 1


class InfiniteLoop(Policy):
    def reconcile(self, job, params, children, ctx):
        spin()

    def cleanup(self, job, children, ctx):
        spin()
