"""The chaos run's report: one JSON file with the fault timeline, the counts over time, each
role's restarts and exits, and the verdicts; and the figures a reader wants first. The same
report as a page to open in a browser beside it (html.py)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exactly.chaos.html import write_html
from exactly.chaos.plan import Kind
from exactly.demo.traffic import TrafficCounts

if TYPE_CHECKING:  # run.py imports this module
    from exactly.chaos.run import ChaosOptions, ChaosOutcome

REPORT_NAME = "chaos-report.json"


def longest_stall_s(samples: Sequence[Mapping[str, float]]) -> float:
    """The longest stretch in which the destination gained nothing while it was behind."""
    longest, since = 0.0, None
    for previous, sample in itertools.pairwise(samples):
        behind = sample["destination"] < sample["committed"]
        if behind and sample["destination"] <= previous["destination"]:
            since = previous["t"] if since is None else since
            longest = max(longest, sample["t"] - since)
        else:
            since = None
    return longest


def write_report(
    report_dir: Path,
    *,
    options: ChaosOptions,
    faults: list[dict[str, object]],
    planned: int,
    samples: list[dict[str, float]],
    roles: dict[str, dict[str, object]],
    traffic: TrafficCounts | None,
    drain_s: float | None,
    outcome: ChaosOutcome,
) -> Path:
    applied = Counter(str(fault["kind"]) for fault in faults if "skipped" not in fault)
    verdict = outcome.verdict
    report: dict[str, Any] = {
        "clean": outcome.clean,
        "options": dataclasses.asdict(options),
        "faults_planned": planned,
        "faults_injected": sum(applied.values()),
        "faults_by_kind": {kind.value: applied.get(kind.value, 0) for kind in Kind},
        "records_committed": traffic.committed if traffic else 0,
        "records_aborted": traffic.aborted if traffic else 0,
        "records_uncertain": traffic.uncertain if traffic else 0,
        "longest_stall_s": round(longest_stall_s(samples), 1),
        "drain_s": None if drain_s is None else round(drain_s, 1),
        "roles": roles,
        "verdict": None
        if verdict is None
        else {
            "headline": verdict.headline(),
            "clean": verdict.clean,
            **{
                name: verdict.total(name)
                for name in ("source", "matched", "missing", "duplicated", "changed")
            },
            "examples": verdict.examples(),
        },
        "failovers": {
            group: dataclasses.asdict(result) for group, result in outcome.failovers.items()
        },
        "failover_errors": outcome.failover_errors,
        "live_group": outcome.live_group,
        "unhealed_links": outcome.unhealed,
        "validate": None if outcome.audit is None else outcome.audit.as_dict(),
        "fault_timeline": faults,
        "samples": samples,
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / REPORT_NAME
    path.write_text(json.dumps(report, indent=2) + "\n")
    write_html(report, report_dir)
    return path
