"""Params are read as serde reads them in the Rust SDK, refusals worded alike."""

import json
from pathlib import Path

import pytest

from policyhost_sdk import (BOOL, STRING, U32, Field, InvalidParams, ListOf, MapOf, Nullable,
                            Params, Struct)


CASES = json.loads((Path(__file__).resolve().parents[2] / "guest-sdk" / "params.json").read_text())["cases"]


class Limit(Params):
    cpu = Field(STRING)


class Example(Params):
    replicas = Field(U32)
    backoff_limit = Field(U32, default=0)
    names = Field(ListOf(STRING), default=[])
    labels = Field(MapOf(STRING), default={})
    verbose = Field(Nullable(BOOL), default=None)
    limit = Field(Nullable(Struct(Limit)), default=None)


def refusal(text):
    with pytest.raises(InvalidParams) as error:
        Example.parse(text)
    return error.value.message


def test_fields_are_read_by_their_camel_case_names_with_defaults():
    params = Example.parse('{"replicas": 3, "backoffLimit": 2}')
    assert (params.replicas, params.backoff_limit, params.names, params.verbose) == (3, 2, [], None)


def test_defaults_are_fresh_per_parse():
    Example.parse('{"replicas": 1}').names.append("x")
    assert Example.parse('{"replicas": 1}').names == []


@pytest.mark.parametrize("case", CASES, ids=[c["params"] for c in CASES])
def test_params_are_read_or_refused_as_the_rust_sdk_does(case):
    try:
        Example.parse(case["params"])
    except InvalidParams as error:
        assert error.message == case["refusal"]
    else:
        assert case["refusal"] is None


def test_text_that_is_not_json_is_refused():
    assert refusal("{").startswith("params: ")


def test_a_blank_text_reads_as_an_empty_object():
    class Nothing(Params):
        pass

    assert isinstance(Nothing.parse("  "), Nothing)
    with pytest.raises(InvalidParams, match="unknown field `x`, there are no fields"):
        Nothing.parse('{"x": 1}')
