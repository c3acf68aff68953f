"""Recurses without end, with Python's own recursion limit lifted so that
the interpreter's C stack and the WebAssembly stack are what run out: the
call must end in a trap or an error of its own, and the host survive, as
for the Rust ``deep-recursion``."""

import sys

from policyhost_sdk import Policy


def dive(depth):
    return dive(depth + 1) + 1


class DeepRecursion(Policy):
    def reconcile(self, job, params, children, ctx):
        sys.setrecursionlimit(1_000_000_000)
        dive(0)
