"""The shipped Grafana dashboard as a user with several flows and their own Prometheus meets it:
the data source is theirs to pick, every query follows the flow filter, and the first row says at
a glance whether the flows move and whether an alert fires."""

from __future__ import annotations

import json
import re

from tests.deploy.deployed import DASHBOARD

_METRIC = re.compile(r"\b((?:exactly|process)_[a-z0-9_]+|ALERTS)(\{[^}]*\})?")


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_data_source_and_the_flow_are_variables():
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    flow = variables["flow"]
    assert flow["multi"]
    assert flow["includeAll"]
    assert "flow)" in flow["definition"]  # label_values(<metric every process serves>, flow)
    for panel in _dashboard()["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_keeps_to_the_flows_chosen():
    for panel in _dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            # A selector by __name__ stands for several metrics at once.
            by_name = re.compile(r"\{__name__[^}]*\}")
            selectors = [("", labels) for labels in by_name.findall(expr)]
            selectors += _METRIC.findall(by_name.sub("", expr))
            assert selectors, expr
            for name, labels in selectors:
                assert 'flow=~"$flow"' in labels, (panel["title"], name, expr)


def test_the_first_row_says_at_a_glance_whether_the_flows_move():
    first_row = [p for p in _dashboard()["panels"] if p["gridPos"]["y"] == 0]
    assert [p["type"] for p in first_row] == ["stat"] * 4
    exprs = " ".join(t["expr"] for p in first_row for t in p["targets"])
    for watched in (
        'ALERTS{alertstate="firing",alertname=~"Exactly.*"',
        "exactly_deduplicator_records_written_total",
        "exactly_deduplicator_backlog_records",
        "exactly_replicator_partitions_stopped",
    ):
        assert watched in exprs, watched
    # No panel of the rest overlaps the first row.
    height = max(p["gridPos"]["h"] for p in first_row)
    assert all(p["gridPos"]["y"] >= height for p in _dashboard()["panels"] if p not in first_row)
