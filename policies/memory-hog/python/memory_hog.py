"""Allocates 1 MiB at a time, and touches it, until memory runs out: the
host's cap stops the linear memory, as for the Rust ``memory-hog``."""

from policyhost_sdk import Policy


def hoard():
    kept = []
    while True:
        kept.append(bytearray(b"x" * (1 << 20)))


class MemoryHog(Policy):
    def reconcile(self, job, params, children, ctx):
        hoard()

    def cleanup(self, job, children, ctx):
        hoard()
