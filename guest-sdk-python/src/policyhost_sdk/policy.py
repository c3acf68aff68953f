"""The ``Policy`` base class and the two calls every SDK makes the same way."""

from __future__ import annotations

from typing import Any, ClassVar, Optional, Sequence

from .inputs import Child, Context, Job
from .params import parse_params
from .result import Cleanup, Reconcile

CLEANUP_RETRY_MS = 2000
"""How long the default ``cleanup`` waits while children still run."""


class Policy:
    """A DataJob policy: a pure function of the job, its children and the
    context. Subclass it, set ``params`` to a :class:`~policyhost_sdk.Params`
    class (``None`` hands ``reconcile`` the raw JSON value), and override
    ``reconcile`` (and ``cleanup`` if the default does not fit).

    Raise :class:`~policyhost_sdk.InvalidParams` or
    :class:`~policyhost_sdk.PolicyError` to report a failure.
    """

    params: ClassVar[Optional[type]] = None

    def reconcile(
        self, job: Job, params: Any, children: Sequence[Child], ctx: Context
    ) -> Reconcile:
        raise NotImplementedError

    def cleanup(self, job: Job, children: Sequence[Child], ctx: Context) -> Cleanup:
        """Done once no child is pending or running."""
        return Cleanup.once_stopped(children, CLEANUP_RETRY_MS)


def run_reconcile(policy: Policy, job: Job, children: Sequence[Child], ctx: Context) -> Reconcile:
    """Reads the params with the policy's class, then calls ``reconcile``."""
    params = parse_params(policy.params, job.params_json)
    return policy.reconcile(job, params, children, ctx)


def run_cleanup(policy: Policy, job: Job, children: Sequence[Child], ctx: Context) -> Cleanup:
    """Calls ``cleanup``: params are not read, so bad params never block a
    deletion."""
    return policy.cleanup(job, children, ctx)
