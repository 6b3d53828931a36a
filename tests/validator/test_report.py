"""The verdict from the counts (pure: no Kafka, no Spark)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from validator.report import build_report
from validator.report_text import verdict_of
from validator.snapshot import ClusterInfo, OffsetRange, Snapshot, TimeRange, TopicPair

SNAPSHOT = Snapshot(
    source=ClusterInfo("s:9092", "S"),
    destination=ClusterInfo("d:9092", "D"),
    pairs=(
        TopicPair(
            "orders",
            "dr.orders",
            {0: OffsetRange(0, 10, 0), 1: OffsetRange(5, 9, 5)},
            {0: OffsetRange(0, 10, 0), 1: OffsetRange(0, 4, 0)},
            source_compacted=False,
        ),
    ),
)


def _report(findings, *, require_complete=False, two_way=False, retention_cut=()):
    moment = datetime(2026, 11, 22, tzinfo=UTC)
    return build_report(
        SNAPSHOT,
        modes={"orders": "provenance"},
        plans={"orders": "merge"},
        records={("source", "orders", 0): 10, ("destination", "orders", 0): 10},
        findings=findings,
        examples={"missing": [], "in_flight": [{"partition": 1}]},
        started=moment,
        finished=moment,
        master="local[*]",
        require_complete=require_complete,
        times=TimeRange(),
        log_starts_moved=[],
        two_way=two_way,
        retention_cut=retention_cut,
    )


def test_only_matched_records_are_clean():
    report = _report({("orders", 0, "matched"): 10, ("orders", 1, "matched"): 4})
    assert report["verdict"] == "clean"
    assert report["exit_status"] == 0
    assert report["totals"]["matched"] == 14
    assert [p["partition"] for p in report["partitions"]] == [0, 1]
    assert report["partitions"][1]["source_range"] == [5, 9]
    assert report["examples"] == {"in_flight": [{"partition": 1}]}  # empty kinds left out


@pytest.mark.parametrize(
    "kind",
    ["missing", "duplicated", "out_of_order", "timestamp_mismatch", "unexpected", "loop_copied"],
)
def test_one_discrepancy_anywhere_fails_the_audit(kind):
    report = _report({("orders", 0, "matched"): 9, ("orders", 1, kind): 1})
    assert report["verdict"] == "discrepancy"
    assert report["exit_status"] == 1
    assert [p["clean"] for p in report["partitions"]] == [True, False]
    assert report["totals"][kind] == 1


def test_in_flight_records_fail_only_when_completeness_is_required():
    findings = {("orders", 0, "matched"): 8, ("orders", 0, "in_flight"): 2}
    assert _report(findings)["exit_status"] == 0
    strict = _report(findings, require_complete=True)
    assert strict["exit_status"] == 1
    assert strict["partitions"][0]["clean"] is False


def test_outside_the_range_is_counted_but_not_a_discrepancy():
    findings = {("orders", 0, "matched"): 8, ("orders", 0, "source_retention"): 3}
    report = _report(findings)
    assert report["exit_status"] == 0
    assert report["partitions"][0]["outside_range"]["source_retention"] == 3
    assert report["totals"]["outside_range"] == 3


@pytest.mark.parametrize("two_way", [False, True])
def test_looped_and_local_records_are_counted_but_not_discrepancies(two_way):
    findings = {
        ("orders", 0, "matched"): 7,
        ("orders", 0, "looped"): 3,
        ("orders", 1, "matched"): 2,
        ("orders", 1, "local"): 2,
    }
    report = _report(findings, two_way=two_way)
    assert report["exit_status"] == 0
    assert report["two_way"] is two_way
    assert [(p["looped"], p["local"]) for p in report["partitions"]] == [(3, 0), (0, 2)]
    assert report["totals"]["looped"] == 3
    assert report["totals"]["local"] == 2
    assert report["totals"]["missing"] == report["totals"]["unexpected"] == 0


def test_records_on_both_sides_and_not_one_match_is_no_verdict():
    """The audit pointed at another source cluster than the flow's: every copy names another
    origin and every source record seems in flight. Clean, it would prove nothing."""
    report = _report({("orders", 0, "in_flight"): 10, ("orders", 0, "other_origin"): 10})
    assert (report["verdict"], report["exit_status"]) == ("unproven", 3)
    assert report["unproven"] == ["orders[0]"]
    text, clean = verdict_of(report)
    assert not clean
    assert text.startswith("NO VERDICT: not one record matched in orders[0]")


def test_a_discrepancy_is_a_discrepancy_even_where_nothing_matched():
    report = _report({("orders", 0, "missing"): 10})
    assert (report["verdict"], report["exit_status"]) == ("discrepancy", 1)


def test_a_source_of_copies_only_is_not_unproven():
    """Two-way: a source partition holding only the other side's copies has nothing to copy."""
    report = _report({("orders", 0, "looped"): 10, ("orders", 0, "local"): 10}, two_way=True)
    assert (report["verdict"], report["exit_status"]) == ("clean", 0)


def test_findings_in_a_partition_retention_cut_during_the_read_give_no_verdict():
    """Its deleted records are absent from the read: copies of them look unexpected, records
    whose copies went look missing. Exit 3, not 1, naming the partition and what to do."""
    findings = {("orders", 0, "matched"): 9, ("orders", 1, "missing"): 2}
    report = _report(findings, retention_cut={("orders", 1)})
    assert (report["verdict"], report["exit_status"]) == ("unproven", 3)
    assert report["retention_cut"] == ["orders[1]"]
    text, clean = verdict_of(report)
    assert not clean
    assert text.startswith("NO VERDICT: retention deleted records of orders[1] while"), text
    assert "--since" in text


@pytest.mark.parametrize(
    ("findings", "uncertain"),
    [
        # Where retention did not cut (and where it did: named, but the verdict stands).
        ({("orders", 0, "unexpected"): 1, ("orders", 1, "missing"): 2}, ["orders[1]"]),
        # Where it did, but of a kind retention cannot make.
        ({("orders", 1, "missing"): 2, ("orders", 1, "duplicated"): 1}, []),
    ],
)
def test_a_discrepancy_retention_cannot_explain_is_still_one(findings, uncertain):
    report = _report(findings, retention_cut={("orders", 1)})
    assert (report["verdict"], report["exit_status"]) == ("discrepancy", 1)
    assert report["retention_cut"] == uncertain


def test_a_partition_retention_cut_but_clean_is_clean():
    clean_cut = _report({("orders", 0, "matched"): 10}, retention_cut={("orders", 0)})
    assert (clean_cut["verdict"], clean_cut["exit_status"]) == ("clean", 0)


def test_a_chart_that_cannot_be_written_leaves_a_report_with_the_status_the_process_exits_with(
    tmp_path, monkeypatch
):
    """Found unwritable after the audit (a disk filled, a directory removed meanwhile): the
    process exits 3, and the JSON report must not say 0."""
    import validator.chart
    from validator.command import _write_outputs

    def refuse(_report, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(validator.chart, "write_chart", refuse)
    report = _report({("orders", 0, "matched"): 10, ("orders", 1, "matched"): 4})
    assert report["exit_status"] == 0
    path = tmp_path / "report.json"
    assert _write_outputs(report, path, tmp_path / "report.html") == 3
    written = json.loads(path.read_text())
    assert written["exit_status"] == 3
    assert written["verdict"] == "clean"  # what the audit found, kept
    assert "No space left on device" in written["chart_not_written"]
