"""The shipped alert rules (deploy/prometheus/alerts.yml) evaluated by Prometheus's own rule
engine, `promtool test rules`: for every rule a case where it fires and one where it stays
silent, on series shaped as the roles export them (each sample with its flow's label,
runtime/flow_label.py). Each alert links a runbook section that docs/operations.md has."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.deployed import ALERT_RULES, built_tool, load_yaml_documents
from tests.replication.processes import REPOSITORY_ROOT

OPERATIONS = REPOSITORY_ROOT / "docs" / "operations.md"


@dataclass
class Case:
    """Series (Prometheus's expanding notation, one sample a minute), evaluated at ``at``: the
    alert ``rule`` fires with exactly the label sets ``fires`` (none: it stays silent)."""

    name: str
    rule: str
    series: dict[str, str]
    at: str
    fires: list[dict[str, str]] = field(default_factory=list)


def _series(name: str, **labels: str) -> str:
    return name + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


def _stage_2(name: str, **labels: str) -> str:
    """A series of flow f's stage 2, process d:1."""
    return _series(name, flow="f", **labels, job="d", instance="d:1")


def _certificate_validity(*, not_before: str, not_after: str) -> dict[str, str]:
    """The two gauges of one process's certificate for the destination (Unix seconds)."""
    labels = {"flow": "f", "cluster": "destination", "job": "d", "instance": "d:1"}
    return {
        _series("exactly_client_certificate_not_before_timestamp_seconds", **labels): not_before,
        _series("exactly_client_certificate_not_after_timestamp_seconds", **labels): not_after,
    }


def _client_certificate_refusals(values: str) -> dict[str, str]:
    """The refusals of one process's certificate by broker b1 (a counter)."""
    labels = {"flow": "f", "broker": "b1:9093", "certificate": "client"}
    series = _series("exactly_broker_certificate_refusals_total", **labels, job="d", instance="d:1")
    return {series: values}


CASES = [
    Case(
        "stage 2 stands still while staging holds records: only that flow, not the one writing",
        "ExactlyFlowStalled",
        {
            _series(
                "exactly_deduplicator_backlog_records",
                flow="stuck",
                partition="0",
                job="d",
                instance="d:1",
            ): "500x20",
            _series(
                "exactly_deduplicator_transactions_total",
                flow="stuck",
                outcome="committed",
                job="d",
                instance="d:1",
            ): "90x20",
            _series(
                "exactly_deduplicator_backlog_records",
                flow="busy",
                partition="0",
                job="d",
                instance="d:2",
            ): "500x20",
            _series(
                "exactly_deduplicator_transactions_total",
                flow="busy",
                outcome="committed",
                job="d",
                instance="d:2",
            ): "0+600x20",
        },
        "15m",
        [{"severity": "critical", "flow": "stuck"}],
    ),
    Case(
        "stage 1 has lag and stage 2 exports nothing at all",
        "ExactlyFlowStalled",
        {
            _series(
                "exactly_replicator_lag_records",
                flow="f",
                topic="t",
                partition="3",
                job="r",
                instance="r:1",
            ): "40x20"
        },
        "15m",
        [{"severity": "critical", "flow": "f"}],
    ),
    Case(
        "an idle flow, caught up, writing nothing",
        "ExactlyFlowStalled",
        {
            _series(
                "exactly_deduplicator_backlog_records",
                flow="f",
                partition="0",
                job="d",
                instance="d:1",
            ): "0x20",
            _series(
                "exactly_replicator_lag_records",
                flow="f",
                topic="t",
                partition="0",
                job="r",
                instance="r:1",
            ): "0x20",
        },
        "15m",
    ),
    Case(
        "only duplicates arrive (stage 1 copied again after a restart): stage 2 is moving",
        "ExactlyFlowStalled",
        {
            _stage_2("exactly_deduplicator_backlog_records", partition="0"): "800x20",
            _stage_2("exactly_deduplicator_duplicates_dropped_total"): "0+400x20",
            _stage_2("exactly_deduplicator_transactions_total", outcome="committed"): "0+40x20",
        },
        "15m",
    ),
    Case(
        "stage 2 produces, but every transaction aborts (a destination refusing its batches)",
        "ExactlyFlowStalled",
        {
            _stage_2("exactly_deduplicator_backlog_records", partition="0"): "800x20",
            _stage_2("exactly_deduplicator_records_written_total", topic="t"): "0+600x20",
            _stage_2("exactly_deduplicator_transactions_total", outcome="aborted"): "0+6x20",
            _stage_2("exactly_deduplicator_transactions_total", outcome="committed"): "12x20",
        },
        "15m",
        [{"severity": "critical", "flow": "f"}],
    ),
    Case(
        "staging backlog growing past 100,000 for 15 minutes",
        "ExactlyLagGrowing",
        {
            _series(
                "exactly_deduplicator_backlog_records",
                flow="f",
                partition="0",
                job="d",
                instance="d:1",
            ): "60000+5000x60",
            _series(
                "exactly_replicator_lag_records",
                flow="f",
                topic="t",
                partition="0",
                job="r",
                instance="r:1",
            ): "50000x60",
        },
        "45m",
        [{"severity": "warning", "flow": "f"}],
    ),
    Case(
        "a large but steady lag",
        "ExactlyLagGrowing",
        {
            _series(
                "exactly_replicator_lag_records",
                flow="f",
                topic="t",
                partition="0",
                job="r",
                instance="r:1",
            ): "200000x60"
        },
        "45m",
    ),
    Case(
        "a record dead-lettered",
        "ExactlyDeadLetter",
        {
            _series(
                "exactly_deduplicator_dead_letters_total", flow="f", job="d", instance="d:1"
            ): "0 0 0 1 1 1"
        },
        "5m",
        [{"severity": "warning", "flow": "f"}],
    ),
    Case(
        "dead letters long ago",
        "ExactlyDeadLetter",
        {
            _series(
                "exactly_deduplicator_dead_letters_total", flow="f", job="d", instance="d:1"
            ): "2x20"
        },
        "15m",
    ),
    Case(
        "a stopped partition",
        "ExactlyPartitionStopped",
        {
            _series(
                "exactly_replicator_partitions_stopped",
                flow="f",
                topic="t",
                partition="2",
                reason="records_lost",
                job="r",
                instance="r:1",
            ): "1x5"
        },
        "3m",
        [
            {
                "severity": "critical",
                "flow": "f",
                "topic": "t",
                "partition": "2",
                "reason": "records_lost",
            }
        ],
    ),
    Case(
        "a partition resumed",
        "ExactlyPartitionStopped",
        {
            _series(
                "exactly_replicator_partitions_stopped",
                flow="f",
                topic="t",
                partition="2",
                reason="records_lost",
                job="r",
                instance="r:1",
            ): "1 1 0 0 0"
        },
        "4m",
    ),
    Case(
        "a stopped staging partition",
        "ExactlyStagingPartitionStopped",
        {
            _series(
                "exactly_deduplicator_partitions_stopped",
                flow="f",
                partition="4",
                reason="data_loss",
                job="d",
                instance="d:1",
            ): "1x5"
        },
        "3m",
        [{"severity": "critical", "flow": "f", "partition": "4", "reason": "data_loss"}],
    ),
    Case(
        "a staging partition no longer stopped (its owner gone)",
        "ExactlyStagingPartitionStopped",
        {
            _series(
                "exactly_deduplicator_partitions_stopped",
                flow="f",
                partition="4",
                reason="data_loss",
                job="d",
                instance="d:1",
            ): "1 1 0 0 0"
        },
        "4m",
    ),
    Case(
        "a topic left out",
        "ExactlyTopicLeftOut",
        {
            _series(
                "exactly_replicator_topics_left_out",
                flow="f",
                topic="orders",
                job="r",
                instance="r:1",
            ): "1x5"
        },
        "3m",
        [{"severity": "warning", "flow": "f", "topic": "orders"}],
    ),
    Case(
        "no topic left out",
        "ExactlyTopicLeftOut",
        {
            _series(
                "exactly_replicator_topics_left_out",
                flow="f",
                topic="orders",
                job="r",
                instance="r:1",
            ): "0x5"
        },
        "3m",
    ),
    Case(
        "a loss found as the partition is first read: the series appears above 0",
        "ExactlyRecordsLost",
        {
            _series(
                "exactly_replicator_records_lost_total",
                flow="f",
                topic="t",
                partition="0",
                job="r",
                instance="r:1",
            ): "_x10 37x10"
        },
        "13m",
        [{"severity": "critical", "flow": "f", "topic": "t"}],
    ),
    Case(
        "a loss while the partition is read",
        "ExactlyRecordsLost",
        {
            _series(
                "exactly_replicator_records_lost_total",
                flow="f",
                topic="t",
                partition="0",
                job="r",
                instance="r:1",
            ): "0x10 5x10"
        },
        "13m",
        [{"severity": "critical", "flow": "f", "topic": "t"}],
    ),
    Case(
        "a loss more than 15 minutes ago",
        "ExactlyRecordsLost",
        {
            _series(
                "exactly_replicator_records_lost_total",
                flow="f",
                topic="t",
                partition="0",
                job="r",
                instance="r:1",
            ): "37x40"
        },
        "35m",
    ),
    Case(
        "a role restarted by its orchestrator three times",
        "ExactlyRestarting",
        {
            _series(
                "process_start_time_seconds", flow="f", job="replicator", instance="r:1"
            ): "100 100 400 400 700 700 1000 1000"
        },
        "7m",
        [{"severity": "warning", "flow": "f", "job": "replicator", "instance": "r:1"}],
    ),
    Case(
        "a role restarted by exactly run three times",
        "ExactlyRestarting",
        {
            _series(
                "exactly_run_role_restarts_total",
                flow="f",
                role="deduplicator",
                job="run",
                instance="x:1",
            ): "0 1 2 3 3"
        },
        "4m",
        [{"severity": "warning", "flow": "f", "role": "deduplicator"}],
    ),
    Case(
        "one restart, and another application's process restarting",
        "ExactlyRestarting",
        {
            _series(
                "process_start_time_seconds", flow="f", job="replicator", instance="r:1"
            ): "100 100 400x6",
            _series("process_start_time_seconds", job="other", instance="o:1"): "1 2 3 4 5 6 7 8",
        },
        "7m",
    ),
    Case(
        "a role's process no longer answers its scrape",
        "ExactlyRoleDown",
        {
            _series(
                "process_start_time_seconds", flow="f", job="deduplicator", instance="d:1"
            ): "100x5 _x10",
            _series("up", job="deduplicator", instance="d:1"): "1x5 0x10",
        },
        "10m",
        [{"severity": "critical", "flow": "f", "job": "deduplicator", "instance": "d:1"}],
    ),
    Case(
        "every role answers; another application's target is down",
        "ExactlyRoleDown",
        {
            _series(
                "process_start_time_seconds", flow="f", job="deduplicator", instance="d:1"
            ): "100x15",
            _series("up", job="deduplicator", instance="d:1"): "1x15",
            _series("up", job="other", instance="o:1"): "0x15",
        },
        "10m",
    ),
    Case(
        "offset sync blind to a group for 10 minutes",
        "ExactlyOffsetSyncBlind",
        {
            _series(
                "exactly_offsetsync_groups",
                flow="f",
                state="target_unknown",
                job="o",
                instance="o:1",
            ): "1x15"
        },
        "12m",
        [{"severity": "warning", "flow": "f"}],
    ),
    Case(
        "offset sync blind for 5 minutes",
        "ExactlyOffsetSyncBlind",
        {
            _series(
                "exactly_offsetsync_groups",
                flow="f",
                state="target_unknown",
                job="o",
                instance="o:1",
            ): "1x5 0x10"
        },
        "12m",
    ),
    Case(
        "a certificate valid for 100 minutes still in use 92 minutes in",
        "ExactlyCertificateExpiring",
        _certificate_validity(not_before="0x100", not_after="6000x100"),
        "92m",
        [
            {
                "severity": "warning",
                "flow": "f",
                "cluster": "destination",
                "job": "d",
                "instance": "d:1",
            }
        ],
    ),
    Case(
        "a certificate renewed and loaded at two thirds of its validity",
        "ExactlyCertificateExpiring",
        _certificate_validity(not_before="0x66 4000x40", not_after="6000x66 10000x40"),
        "100m",
    ),
    Case(
        "a client certificate refused at every reconnect",
        "ExactlyCertificateRefused",
        _client_certificate_refusals("2+2x10"),
        "6m",
        [{"severity": "critical", "flow": "f", "broker": "b1:9093", "certificate": "client"}],
    ),
    Case(
        "refusals that ended when the mended role restarted",
        "ExactlyCertificateRefused",
        _client_certificate_refusals("2 4 6 _ _ _ _ _ _ _ _"),
        "8m",
    ),
    Case(
        "a broker out of reach for minutes",
        "ExactlyBrokerUnreachable",
        {
            _series(
                "exactly_broker_unreachable_seconds",
                flow="f",
                broker="b1:9092",
                job="r",
                instance="r:1",
            ): "0+60x10"
        },
        "6m",
        [{"severity": "warning", "flow": "f", "broker": "b1:9092"}],
    ),
    Case(
        "a broker restart of a minute",
        "ExactlyBrokerUnreachable",
        {
            _series(
                "exactly_broker_unreachable_seconds",
                flow="f",
                broker="b1:9092",
                job="r",
                instance="r:1",
            ): "0 30 60 0 0 0 0"
        },
        "6m",
    ),
]


def _rules() -> dict[str, dict[str, Any]]:
    groups = load_yaml_documents(ALERT_RULES)[0]["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _expected_annotations(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them for an alert with ``labels``: only
    ``{{ $labels.name }}`` is used in them (a name the alert lacks stays, and fails the case)."""
    rendered = {}
    for key, text in rule.get("annotations", {}).items():
        for name, value in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", value)
        rendered[key] = text
    return rendered


def _promtool() -> Path:
    """promtool as `make install` takes it out of Debian's prometheus package (or one on PATH)."""
    found = built_tool("promtool/promtool", "promtool")
    if found is None:
        pytest.skip("no promtool: `make install` takes it from Debian's prometheus package")
    return found


def test_every_alert_has_a_case_that_fires_and_one_that_stays_silent():
    rules = _rules()
    assert {case.rule for case in CASES if case.fires} == set(rules)
    assert {case.rule for case in CASES if not case.fires} == set(rules)


def test_the_alert_rules_fire_and_stay_silent_as_their_cases_say(tmp_path):
    promtool = _promtool()
    checked = subprocess.run(
        [promtool, "check", "rules", ALERT_RULES], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = _rules()
    tests = []
    for case in CASES:
        rule = rules[case.rule]
        expected = [
            {
                "exp_labels": labels,
                "exp_annotations": _expected_annotations(rule, labels),
            }
            for labels in case.fires
        ]
        tests.append(
            {
                "name": case.name,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
                "alert_rule_test": [
                    {"eval_time": case.at, "alertname": case.rule, "exp_alerts": expected}
                ],
            }
        )
    unit = tmp_path / "alerts-test.yml"
    unit.write_text(
        yaml.safe_dump(
            {"rule_files": [str(ALERT_RULES)], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    done = subprocess.run(
        [promtool, "test", "rules", unit], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout


def test_every_alert_links_a_runbook_section_the_operations_page_has():
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.MULTILINE)
    }
    for name, rule in _rules().items():
        link = rule["annotations"].get("runbook_url", "")
        assert link == f"docs/operations.md#{name.lower()}", (name, link)
        assert name.lower() in anchors, f"docs/operations.md has no section {name}"
