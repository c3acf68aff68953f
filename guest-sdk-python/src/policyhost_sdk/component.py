"""The bridge between a :class:`~policyhost_sdk.Policy` and the WIT world
``datajob-policy``, as componentize-py binds it.

Imported only inside the component build: ``wit_world`` is the module
componentize-py generates from ``wit/``. The build command
(:mod:`policyhost_sdk.componentize`) writes the app module that calls
:func:`export`.
"""

from __future__ import annotations

from typing import Sequence

import wit_world  # type: ignore[import-not-found]
from componentize_py_types import Err  # type: ignore[import-not-found]
from wit_world.imports import host, types  # type: ignore[import-not-found]

from . import log as _log
from .inputs import Child, ChildPhase, Context, Job
from .policy import Policy, run_cleanup, run_reconcile
from .result import Cleanup, InvalidParams, PolicyError, Reconcile


def _job(job: "types.DataJob") -> Job:
    return Job(
        name=job.name,
        namespace=job.namespace,
        uid=job.uid,
        generation=job.generation,
        labels={kv.key: kv.value for kv in job.labels},
        annotations={kv.key: kv.value for kv in job.annotations},
        params_json=job.params,
        status_json=job.status,
        deletion_unix_ms=job.deletion_unix_ms,
    )


def _children(children: Sequence["types.Child"]) -> list[Child]:
    return [
        Child(
            name=child.name,
            api_version=child.api_version,
            kind=child.kind,
            phase=ChildPhase[child.phase.name],
            ready=child.ready,
            deleting=child.deleting,
            labels={kv.key: kv.value for kv in child.labels},
        )
        for child in children
    ]


def _context(ctx: "types.Context") -> Context:
    return Context(ctx.now_unix_ms, ctx.attempt, ctx.policy_digest)


def _reconcile_result(result: Reconcile) -> "types.ReconcileResult":
    status = result.status
    return types.ReconcileResult(
        children=[
            types.DesiredChild(c.api_version, c.kind, c.name, c.manifest) for c in result.children
        ],
        status=types.Status(
            phase=str(status.phase),
            message=status.message,
            conditions=[
                types.Condition(c.type, c.status, c.reason, c.message) for c in status.conditions
            ],
            outputs=status.outputs_json(),
        ),
        requeue_after_ms=result.requeue_after_ms,
        events=[types.Event(e.warning, e.reason, e.message) for e in result.events],
    )


def _cleanup_result(result: Cleanup) -> "types.CleanupResult":
    if result.retry_after_ms is None:
        return types.CleanupResult_Done()
    return types.CleanupResult_RetryAfterMs(result.retry_after_ms)


def _error(error: PolicyError) -> Err:
    if isinstance(error, InvalidParams):
        return Err(types.PolicyError_InvalidParams(error.message))
    return Err(types.PolicyError_Failed(error.message))


def _host_log(level: _log.Level, message: str) -> None:
    host.log(host.Level(level.value), message)


def export(policy_class: type) -> type:
    """The ``WitWorld`` class componentize-py exports, calling a fresh
    ``policy_class()`` per call (every call runs in a fresh instance anyway)."""
    if not (isinstance(policy_class, type) and issubclass(policy_class, Policy)):
        raise TypeError(f"{policy_class!r} is not a subclass of policyhost_sdk.Policy")
    _log.set_sink(_host_log)

    class WitWorld(wit_world.WitWorld):
        def reconcile(self, job, children, ctx):
            try:
                result = run_reconcile(policy_class(), _job(job), _children(children), _context(ctx))
            except PolicyError as error:
                raise _error(error) from None
            return _reconcile_result(result)

        def cleanup(self, job, children, ctx):
            try:
                result = run_cleanup(policy_class(), _job(job), _children(children), _context(ctx))
            except PolicyError as error:
                raise _error(error) from None
            return _cleanup_result(result)

    return WitWorld
