"""The Python fanout against the golden cases of the Rust one."""

from pathlib import Path

from policyhost_sdk.testing import assert_golden_dir

from fanout import Fanout, parse_worker, worker_name

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"


def test_every_golden_case_of_the_rust_fanout():
    assert_golden_dir(Fanout(), GOLDEN)


def test_worker_names_round_trip_and_foreign_names_do_not_parse():
    for index, retry in [(0, 0), (7, 0), (3, 1), (999, 12)]:
        assert parse_worker("job", worker_name("job", index, retry)) == (index, retry)
    for other in ["job", "job-worker-", "job-worker-x", "job-worker-01", "job-worker-1-r0",
                  "job-worker-1-r", "other-worker-1", "job-worker-1-r02", "job-worker--1",
                  "job-worker-١"]:
        assert parse_worker("job", other) is None, other
