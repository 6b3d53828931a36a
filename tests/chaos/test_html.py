"""The chaos report's HTML page, made from a report as write_report writes it."""

from __future__ import annotations

from html.parser import HTMLParser

from exactly.chaos.html import render

REPORT = {
    "clean": False,
    "options": {"minutes": 1.0, "faults": 2, "rate": 400.0, "seed": 8},
    "faults_planned": 3,
    "faults_injected": 3,
    "faults_by_kind": {"kill": 1, "broker": 1, "network": 1},
    "records_committed": 20_000,
    "records_aborted": 300,
    "records_uncertain": 25,
    "longest_stall_s": 12.5,
    "drain_s": 1.5,
    "roles": {
        "replicator": {
            "starts": 2,
            "unexpected_exits": [{"t": 14.2, "status": 1}],
            "sigterm_exit": 0,
            "peak_rss_mib": 104.1,
        }
    },
    "verdict": {"headline": "NOT EXACTLY ONCE: 20000 records, 7 missing", "missing": 7},
    "failovers": {
        "chaos-live": {
            "partitions": 3,
            "processed": 900,
            "read": 4,
            "re_read": 0,
            "skipped": 0,
            "exact": True,
        },
    },
    "failover_errors": {"chaos-app": "chaos-app was not moved to the target within 60 s"},
    "live_group": {"processed": 900, "commits": 55, "failed_commits": 6},
    "fault_timeline": [
        {"kind": "broker", "target": "target", "began_s": 10.0, "ended_s": 20.0},
        {"kind": "kill", "target": "replicator<&>", "began_s": 14.0, "ended_s": 16.0},
        {
            "kind": "network",
            "variant": "blackhole",
            "target": "offsetsync@source",
            "began_s": 20.0,
            "ended_s": 52.0,
        },
    ],
    "samples": [
        {"t": 0.0, "committed": 0, "destination": 0},
        {"t": 30.0, "committed": 10_000, "destination": 4_000},
        {"t": 60.0, "committed": 20_000, "destination": 19_993},
    ],
}


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [f"{n}={v}" for n, v in attrs if n in ("src", "href")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_page_leads_with_the_verdicts_and_draws_every_fault():
    page = render(REPORT)
    parsed = _Elements()
    parsed.feed(page)
    text = " ".join(parsed.text)
    assert "CHAOS RUN NOT CLEAN" in text
    assert "NOT EXACTLY ONCE: 20000 records, 7 missing" in text
    assert "FAILED: chaos-app was not moved" in text
    assert "EXACT: 3 partitions, 0 read again, 0 skipped" in text  # chaos-live's
    assert "900 records processed, 55 commits, 6 failed under faults" in text
    assert parsed.tags.count("rect") == 3  # one bar per fault
    assert "network blackhole" in text
    assert parsed.tags.count("polyline") == 2  # committed and destination over time
    assert "replicator<&>" in text  # escaped in the markup, the name itself on the page
    assert "14.2: 1" in text  # the replicator's exit by itself
    # Self-contained: nothing to fetch.
    assert parsed.links == []
    assert "<script" not in page


def test_a_clean_run_says_so():
    page = render({**REPORT, "clean": True, "failover_errors": {}})
    assert '<h1 class="clean">CHAOS RUN CLEAN</h1>' in page


def test_the_page_says_the_nodes_which_node_a_fault_took_and_what_the_longest_stall_began_under():
    report = {
        **REPORT,
        "options": {**REPORT["options"], "faults": None, "nodes": 3},
        "nodes_per_cluster": 3,
        "fault_timeline": [{**REPORT["fault_timeline"][0], "node": 2, "hit": "node 2"}],
        "longest_stall": {
            "began_s": 12.0,
            "ended_s": 30.0,
            "cause": "longest stall 18.0 s, from 12.0 s to 30.0 s: active when it began: "
            "broker target (node 2) [10.0-20.0 s]",
        },
    }
    parsed = _Elements()
    parsed.feed(render(report))
    text = " ".join(parsed.text)
    assert "3 faults (the default for the window)" in text
    assert "3 nodes per cluster" in text
    assert "node 2" in text
    assert "active when it began: broker target (node 2) [10.0-20.0 s]" in text
    assert parsed.tags.count("rect") == 2  # the fault's bar and the stall's shade
