"""Write policyhost DataJob policies in Python and build them into
WebAssembly components of the ``datajob-policy`` world.

A policy is a pure function of the DataJob, its children and the context;
the host runs every call in a fresh, capped instance. See
``docs/policies.md`` for the path from a module to a running policy.
"""

#: This SDK's version: its minor names the world it targets
#: (:data:`policyhost_sdk.made_with.WORLD`).
__version__ = "0.1.0"

from .inputs import Child, ChildPhase, Context, Job
from .params import (ANY, BOOL, F64, I64, STRING, U32, U64, AnyJson, Field, ListOf, MapOf,
                     Nullable, Params, Struct)
from . import log, status
from .policy import CLEANUP_RETRY_MS, Policy, run_cleanup, run_reconcile
from .result import (Cleanup, Condition, DesiredChild, Event, InvalidParams, Phase, PolicyError,
                     Reconcile, Status)

__all__ = [
    "ANY", "BOOL", "CLEANUP_RETRY_MS", "F64", "I64", "STRING", "U32", "U64", "AnyJson", "Child",
    "ChildPhase", "Cleanup", "Condition", "Context", "DesiredChild", "Event", "Field",
    "InvalidParams", "Job", "ListOf", "MapOf", "Nullable", "Params", "Phase", "Policy",
    "PolicyError", "Reconcile", "Status", "Struct", "log", "run_cleanup", "status", "run_reconcile",
]
