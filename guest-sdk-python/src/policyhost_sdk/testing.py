"""Golden cases, run natively: the shared case format
(``policies/fanout/tests/golden/README.md``) is the contract between the
SDKs of every language and the host, which runs the same files through the
compiled component (``policyhost policy test``).

    from policyhost_sdk.testing import assert_golden_dir
    def test_golden():
        assert_golden_dir(Fanout(), Path(__file__).parent / "golden")

``POLICYHOST_BLESS=1`` rewrites each ``expected`` with what the policy
answers; review the diff.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from .inputs import Child, ChildPhase, Context, Job
from .policy import Policy, run_cleanup, run_reconcile
from .result import PolicyError


class CaseError(Exception):
    """A golden file that cannot be read, named with the reason."""


def _compact(value: Any) -> str:
    """JSON text as the Rust harness and the host send it: compact, keys sorted."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_JOB_FIELDS = {"name", "namespace", "uid", "generation", "labels", "annotations", "params",
               "status", "deletionUnixMs"}
_CHILD_FIELDS = {"apiVersion", "kind", "name", "phase", "ready", "deleting", "labels"}
_CONTEXT_FIELDS = {"nowUnixMs", "attempt", "policyDigest"}
_CASE_FIELDS = {"description", "call", "job", "children", "context", "http", "expected"}


def _fields(what: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CaseError(f"{what} must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise CaseError(f"{what} has unknown field `{unknown[0]}`")
    return value


@dataclass
class Golden:
    """One golden case: a call's inputs and the result JSON expected."""

    description: str
    call: str
    job: Job
    children: list[Child]
    context: Context
    expected: Any
    document: dict[str, Any]

    @classmethod
    def from_json(cls, document: Any) -> "Golden":
        document = _fields("case", document, _CASE_FIELDS)
        if document.get("http"):
            raise CaseError("cases with `http` exchanges are not supported natively in Python")
        call = document.get("call")
        if call not in ("reconcile", "cleanup"):
            raise CaseError(f"call must be `reconcile` or `cleanup`, not {call!r}")
        if "expected" not in document:
            raise CaseError("missing field `expected`")
        return cls(
            description=document.get("description", ""),
            call=call,
            job=_job(_fields("job", document.get("job"), _JOB_FIELDS)),
            children=[_child(_fields("child", c, _CHILD_FIELDS))
                      for c in document.get("children") or []],
            context=_context(_fields("context", document.get("context") or {}, _CONTEXT_FIELDS)),
            expected=document["expected"],
            document=document,
        )

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Golden":
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, CaseError) as error:
            raise CaseError(f"{path}: {error}") from None

    def run(self, policy: Policy) -> Any:
        """The result JSON the policy answers."""
        try:
            if self.call == "reconcile":
                return run_reconcile(policy, self.job, self.children, self.context).to_json()
            return run_cleanup(policy, self.job, self.children, self.context).to_json()
        except PolicyError as error:
            return error.to_json()


def _job(fixture: dict[str, Any]) -> Job:
    if "name" not in fixture:
        raise CaseError("job: missing field `name`")
    name = fixture["name"]
    status = fixture.get("status")
    return Job(
        name=name,
        namespace=fixture.get("namespace", "default"),
        uid=fixture.get("uid") or f"uid-{name}",
        generation=fixture.get("generation", 1),
        labels=dict(sorted((fixture.get("labels") or {}).items())),
        annotations=dict(sorted((fixture.get("annotations") or {}).items())),
        params_json=_compact(fixture.get("params", {})),
        status_json=None if status is None else _compact(status),
        deletion_unix_ms=fixture.get("deletionUnixMs"),
    )


def _child(fixture: dict[str, Any]) -> Child:
    return Child(
        api_version=fixture.get("apiVersion", "v1"),
        kind=fixture.get("kind", "Pod"),
        name=fixture["name"],
        phase=ChildPhase(fixture.get("phase", "pending")),
        ready=fixture.get("ready", False),
        deleting=fixture.get("deleting", False),
        labels=dict(sorted((fixture.get("labels") or {}).items())),
    )


def _context(fixture: dict[str, Any]) -> Context:
    return Context(
        now_unix_ms=fixture.get("nowUnixMs", 1_700_000_000_000),
        attempt=fixture.get("attempt", 1),
        policy_digest=fixture.get("policyDigest", "native"),
    )


def assert_golden_dir(policy: Policy, directory: Union[str, Path]) -> None:
    """Runs every ``*.json`` case of ``directory`` and fails listing every
    mismatch (or, with ``POLICYHOST_BLESS=1``, rewrites them)."""
    paths = sorted(Path(directory).glob("*.json"))
    assert paths, f"no golden files in {directory}"
    bless = os.environ.get("POLICYHOST_BLESS") == "1"
    mismatches = []
    for path in paths:
        case = Golden.load(path)
        actual = case.run(policy)
        if actual == case.expected:
            continue
        if bless:
            case.document["expected"] = actual
            path.write_text(json.dumps(case.document, indent=2, ensure_ascii=False) + "\n")
        else:
            mismatches.append(
                f"{path}:\n  expected: {_compact(case.expected)}\n  actual:   {_compact(actual)}"
            )
    assert not mismatches, "golden mismatches (POLICYHOST_BLESS=1 rewrites them):\n" + "\n".join(
        mismatches
    )
