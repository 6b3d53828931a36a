"""What a person reads from a validation report: the terminal summary and the HTML chart."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from validator.chart import write_chart
from validator.render import DISCREPANCY_KINDS, render_table

_OUTSIDE_REASONS = (
    "source_retention",
    "destination_retention",
    "compacted",
    "other_origin",
    "after_range",
)


def _partition(
    topic: str,
    partition: int,
    records: int,
    *,
    destination_topic: str | None = None,
    in_flight: int = 0,
    after_range: int = 0,
    looped: int = 0,
    local: int = 0,
    **discrepancies: int,
) -> dict[str, Any]:
    assert set(discrepancies) <= set(DISCREPANCY_KINDS)
    counts = {kind: discrepancies.get(kind, 0) for kind in DISCREPANCY_KINDS}
    lost = counts["missing"]
    extra = counts["duplicated"] + counts["unexpected"]
    changed = sum(counts.values()) - lost - extra
    return {
        "source_topic": topic,
        "destination_topic": destination_topic or topic,
        "partition": partition,
        "match": "provenance",
        "source_range": [0, records],
        "destination_range": [0, records - lost + extra + 3],
        "source_records": records,
        "destination_records": records - lost + extra,
        "matched": records - lost - changed,
        **counts,
        "in_flight": in_flight,
        "looped": looped,
        "local": local,
        "outside_range": {
            reason: after_range if reason == "after_range" else 0 for reason in _OUTSIDE_REASONS
        },
        "clean": not any(counts.values()),
    }


def _report(
    partitions: list[dict[str, Any]], examples: dict[str, list[dict[str, Any]]] | None = None
) -> dict[str, Any]:
    counters = ("source_records", "destination_records", "matched", *DISCREPANCY_KINDS)
    totals = {counter: sum(p[counter] for p in partitions) for counter in counters}
    for counter in ("in_flight", "looped", "local"):
        totals[counter] = sum(p[counter] for p in partitions)
    totals["outside_range"] = sum(sum(p["outside_range"].values()) for p in partitions)
    clean = all(p["clean"] for p in partitions)
    pairs = {(p["source_topic"], p["destination_topic"]) for p in partitions}
    return {
        "verdict": "clean" if clean else "discrepancy",
        "exit_status": 0 if clean else 1,
        "started_at": "2026-11-22T06:00:00Z",
        "finished_at": "2026-11-22T06:00:12Z",
        "seconds": 12.3,
        "master": "local[*]",
        "source": {"bootstrap_servers": "127.0.0.1:9092", "cluster_id": "src-cluster"},
        "destination": {"bootstrap_servers": "127.0.0.1:9093", "cluster_id": "dst-cluster"},
        "require_complete": False,
        "topics": [
            {"source_topic": s, "destination_topic": d, "match": "provenance"}
            for s, d in sorted(pairs)
        ],
        "totals": totals,
        "partitions": partitions,
        "examples": examples or {},
    }


def _example(
    topic: str,
    partition: int,
    source_offset: int | None,
    destination_offset: int | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    return {
        "source_topic": topic,
        "partition": partition,
        "source_offset": source_offset,
        "destination_topic": topic,
        "destination_partition": None if destination_offset is None else partition,
        "destination_offset": destination_offset,
        "detail": detail,
    }


@pytest.fixture
def clean_report() -> dict[str, Any]:
    return _report([_partition("orders", p, 100) for p in range(3)])


@pytest.fixture
def bad_report() -> dict[str, Any]:
    partitions = [
        _partition("orders", 0, 100, in_flight=4),
        _partition("orders", 1, 100, after_range=2),
        _partition("orders", 3, 100, missing=1, duplicated=2),
        _partition("<b>x</b>", 0, 50, value_mismatch=1),
    ]
    examples = {
        "missing": [_example("orders", 3, 17)],
        "duplicated": [_example("orders", 3, 40, 41), _example("orders", 3, 40, 42)],
        "value_mismatch": [_example("<b>x</b>", 0, 5, 5, detail="value hash differs")],
    }
    return _report(partitions, examples)


def _rendered(report: dict[str, Any]) -> str:
    console = Console(record=True, width=160)
    render_table(report, console)
    return console.export_text()


def test_clean_report_says_exactly_once(clean_report: dict[str, Any]) -> None:
    text = _rendered(clean_report)

    assert "EXACTLY ONCE: 300 records in 3 partitions match" in text
    assert "DISCREPANCY" not in text
    assert "in flight, not checked" not in text
    # Every discrepancy column is empty, so none is drawn and the note says so.
    assert "no missing, duplicated, out of order, key mismatch" in text
    assert "unexpected or loop copied in any partition" in text
    assert "examples" not in text


def test_discrepancies_show_counts_examples_and_caveats(bad_report: dict[str, Any]) -> None:
    text = _rendered(bad_report)

    assert (
        "DISCREPANCY: 1 missing, 2 duplicated, 1 value mismatch "
        "(4 records still in flight, not checked) (2 outside the checked range)"
    ) in text
    assert "missing: orders[3] source offset 17 → destination (none)" in text
    assert "duplicated: orders[3] source offset 40 → destination orders[3] offset 42" in text
    assert (
        "value mismatch: <b>x</b>[0] source offset 5 → destination <b>x</b>[0] offset 5"
        " — value hash differs"
    ) in text
    # Only the kinds that occur are columns; the others are named once below the table.
    header = next(line for line in text.splitlines() if "source topic" in line)
    assert "missing" in header
    assert "duplicated" in header
    assert "unexpected" not in header
    assert "no out of order, key mismatch, headers mismatch" in text
    assert "wrong partition, unexpected or loop copied in any partition" in text
    assert text.count("DISCREPANCY") == 3  # two partition rows and the verdict


def test_looped_and_local_records_are_shown_beside_a_clean_verdict(tmp_path: Path) -> None:
    report = _report(
        [_partition("orders", 0, 100, looped=4), _partition("orders", 1, 100, local=6)]
    )
    report["two_way"] = True
    text = _rendered(report)

    header = next(line for line in text.splitlines() if "source topic" in line)
    assert "looped" in header
    assert "local" in header
    assert (
        "EXACTLY ONCE: 200 records in 2 partitions match (4 looped: source records that are "
        "copies, not copied again) (6 local: produced on the destination cluster)"
    ) in text
    assert ", two-way" in text
    page = _chart(report, tmp_path)
    assert '<h1 class="clean">EXACTLY ONCE: 200 records in 2 partitions match (4 looped' in page
    assert "orders[0]: 100 matched, 0 in flight, 4 looped, 0 outside the checked range" in page
    assert "orders[1]: 100 matched, 0 in flight, 6 local, 0 outside the checked range" in page


def test_a_copied_loop_is_a_discrepancy_with_its_own_colour(tmp_path: Path) -> None:
    report = _report(
        [_partition("orders", 0, 100, looped=3, loop_copied=1)],
        {"loop_copied": [_example("orders", 0, 17, 40, detail="a copy, copied again")]},
    )
    text = _rendered(report)

    assert "DISCREPANCY: 1 loop copied (3 looped" in text
    assert (
        "loop copied: orders[0] source offset 17 → destination orders[0] offset 40"
        " — a copy, copied again"
    ) in text
    header = next(line for line in text.splitlines() if "source topic" in line)
    assert "loop copied" in header
    assert "local" not in header  # no partition has any
    legend = _legend(_chart(report, tmp_path))
    assert 'background:#000000"></span>loop copied' in legend


def test_renamed_topic_gets_a_destination_column() -> None:
    text = _rendered(_report([_partition("orders", 0, 10, destination_topic="orders.copy")]))

    header = next(line for line in text.splitlines() if "source topic" in line)
    assert "destination topic" in header
    assert "orders.copy" in text
    assert "EXACTLY ONCE: 10 records in 1 partition match" in text


def test_long_reports_keep_every_bad_partition_and_cut_clean_ones() -> None:
    partitions = [_partition("orders", p, 10) for p in range(100)]
    partitions[90] = _partition("orders", 90, 10, wrong_partition=3)
    text = _rendered(_report(partitions))

    assert "… 60 more clean partitions" in text
    rows = [line for line in text.splitlines() if re.match(r"\W*orders\b", line)]
    assert len(rows) == 40
    assert any(" 90 " in row and "DISCREPANCY" in row for row in rows)
    total = next(line for line in text.splitlines() if "total" in line)
    assert "1,000" in total  # the source records of all 100 partitions, not of the 40 shown
    assert "DISCREPANCY: 3 wrong partition" in text


class _StrictParser(HTMLParser):
    """Fails on any element closed out of order or left open: html.parser itself never does."""

    _VOID = frozenset({"meta", "br", "hr", "img", "input", "link"})

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self._VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()


def _chart(report: dict[str, Any], directory: Path) -> str:
    path = directory / "chart.html"
    write_chart(report, path)
    assert list(directory.iterdir()) == [path]
    page = path.read_text(encoding="utf-8")
    parser = _StrictParser()
    parser.feed(page)
    parser.close()
    assert parser.errors == []
    assert parser.open == []
    assert "<svg" in page
    assert "<script" not in page
    assert re.search(r"https?:|//[a-z]", page) is None
    assert "url(" not in page
    return page


def _legend(page: str) -> str:
    match = re.search(r'<div class="legend" id="legend-discrepancies">(.*?)</div>', page)
    assert match is not None
    return match.group(1)


def test_chart_of_a_clean_report(clean_report: dict[str, Any], tmp_path: Path) -> None:
    page = _chart(clean_report, tmp_path)

    assert "<title>EXACTLY ONCE: 300 records in 3 partitions match — 2026-11-22T06:00:12Z" in page
    assert "No discrepancies in any of the 3 partitions." in page
    assert 'id="legend-discrepancies"' not in page
    assert page.count("<rect") == 6  # source and destination bar of each partition


def test_chart_of_discrepancies(bad_report: dict[str, Any], tmp_path: Path) -> None:
    page = _chart(bad_report, tmp_path)

    assert '<h1 class="discrepancy">DISCREPANCY: 1 missing, 2 duplicated' in page
    assert "2026-11-22T06:00:12Z" in page
    assert "<b>x</b>" not in page
    assert "&lt;b&gt;x&lt;/b&gt;[0]" in page
    legend = _legend(page)
    for label in ("missing", "duplicated", "value mismatch"):
        assert label in legend
    assert "unexpected" not in legend
    assert "2 of 4 partitions have discrepancies" in page
    assert "<td>missing</td><td>orders[3] source offset 17</td><td>destination (none)</td>" in page
    assert "<td>value hash differs</td>" in page


@pytest.mark.parametrize("count", [1, 500])
def test_chart_height_follows_the_partitions_and_scrolls(count: int, tmp_path: Path) -> None:
    partitions = [_partition("orders", p, 1000 + p) for p in range(count)]
    partitions[-1] = _partition("orders", count - 1, 5000, unexpected=7)
    page = _chart(_report(partitions), tmp_path)

    heights = [int(h) for h in re.findall(r'<svg width="\d+" height="(\d+)"', page)]
    assert heights[0] >= 20 * count  # one readable row per partition
    assert heights[1] < 40  # only the one bad partition is drawn in the discrepancy chart
    assert "max-height: 70vh; overflow: auto" in page
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)"', page)]
    assert max(widths) == pytest.approx(560.0)  # the largest partition fills the bar area
    assert "unexpected" in _legend(page)
