"""The cases every SDK agrees on: name rules (``names/cases.json``) and
builders (``guest-sdk/builders.json``, whose expectations the Rust builders
wrote)."""

import json
from pathlib import Path

import pytest

from policyhost_sdk import build, names

ROOT = Path(__file__).resolve().parents[2]
NAME_CASES = json.loads((ROOT / "names" / "cases.json").read_text())
BUILDER_CASES = json.loads((ROOT / "guest-sdk" / "builders.json").read_text())["cases"]


def test_every_rule_of_the_shared_cases_is_implemented():
    assert sorted(names.RULES) == sorted(NAME_CASES["rules"])


@pytest.mark.parametrize("rule", sorted(NAME_CASES["rules"]))
def test_name_rules_agree_with_the_shared_cases(rule):
    for case in NAME_CASES["rules"][rule]:
        assert names.RULES[rule](case["text"]) == case["reason"], (rule, case["text"])


def _apply(builder, calls):
    for method, *args in calls:
        if method == "container":
            spec = args[0]
            args = [_apply(build.Container(spec["name"], spec["image"]), spec["calls"])]
        elif method == "restart_policy":
            args = [build.RestartPolicy(args[0])]
        elif method == "access_mode":
            args = [build.AccessMode(args[0])]
        elif method == "update_strategy":
            args = [build.UpdateStrategy(args[0])]
        getattr(builder, method)(*args)
    return builder


def _make(case):
    if case["builder"] == "PodTemplate":
        template = _apply(build.Pod(case["name"]), case["calls"]).template()
        pod = case["pod"]
        return _apply(template.pod(pod["name"]), pod["calls"]).build()
    return _apply(getattr(build, case["builder"])(case["name"]), case["calls"]).build()


@pytest.mark.parametrize("case", BUILDER_CASES, ids=[c["description"] for c in BUILDER_CASES])
def test_builders_make_what_the_rust_builders_make(case):
    try:
        child = _make(case)
    except build.BuildError as error:
        assert {"error": error.message} == case["expected"]
        return
    assert {"manifest": json.loads(child.manifest)} == case["expected"]
