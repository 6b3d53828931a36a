"""The chaos run's report: one JSON file with the fault timeline, the counts over time, each
role's restarts and exits, and the verdicts; and the figures a reader wants first. The same
report as a page to open in a browser beside it (html.py)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exactly.chaos.html import write_html
from exactly.chaos.plan import Kind
from exactly.harness.traffic import TrafficCounts

if TYPE_CHECKING:
    from exactly.chaos.options import ChaosOptions, ChaosOutcome
    from exactly.chaos.world import Instance

REPORT_NAME = "chaos-report.json"
# A fault that ended this long before a stall began is named among its possible causes: a
# role's group moves on within its session (6 s), a restarted broker serves once its dead
# predecessor is fenced (7 s), and a role restarted after either takes seconds to commit.
AFTERMATH_S = 15.0
# The samples' spacing (run.py): a stall began at most this long after its last gaining sample.
SAMPLE_RESOLUTION_S = 1.0
_TOP_TARGETS = 5


@dataclass(frozen=True, slots=True)
class Stall:
    """A stretch in which the destination gained nothing while it was behind the source."""

    began_s: float  # the sample after which the destination gained nothing
    ended_s: float  # the last sample of it (the next one gains, or is not behind)

    @property
    def seconds(self) -> float:
        return self.ended_s - self.began_s


def longest_stall(samples: Sequence[Mapping[str, float]]) -> Stall | None:
    """The longest stall of the run (the first of equals), or None if the destination never
    stood still while behind."""
    longest: Stall | None = None
    since = None
    for previous, sample in itertools.pairwise(samples):
        behind = sample["destination"] < sample["committed"]
        if behind and sample["destination"] <= previous["destination"]:
            since = previous["t"] if since is None else since
            if longest is None or sample["t"] - since > longest.seconds:
                longest = Stall(since, sample["t"])
        else:
            since = None
    return longest


def stall_causes(
    stall: Stall,
    faults: Sequence[Mapping[str, Any]],
    roles: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """What the run did around a stall's start, from the fault timeline and the roles' exits:
    the faults active when it began (within a sample of its last gain), those that had ended
    within AFTERMATH_S before, the role exits from then to its end, the faults that began
    during it, and one line saying so (``cause``)."""
    began, ended = stall.began_s, stall.ended_s
    first_flat = began + SAMPLE_RESOLUTION_S
    applied = [fault for fault in faults if "skipped" not in fault and "began_s" in fault]
    active = [f for f in applied if f["began_s"] <= first_flat and _end(f) >= began]
    just_ended = [f for f in applied if began - AFTERMATH_S <= _end(f) < began]
    during = [f for f in applied if first_flat < f["began_s"] <= ended]
    exits = sorted(
        (
            {"role": name, "t": exit_["t"], "status": exit_["status"]}
            for name, role in roles.items()
            for exit_ in role.get("unexpected_exits", [])
            if began - AFTERMATH_S <= exit_["t"] <= ended
        ),
        key=lambda exit_: exit_["t"],
    )
    return {
        "began_s": round(began, 1),
        "ended_s": round(ended, 1),
        "seconds": round(stall.seconds, 1),
        "active_when_it_began": [_described(f) for f in active],
        "ended_just_before": [_described(f) for f in just_ended],
        "role_exits": exits,
        "faults_during": len(during),
        "faults_during_by_target": dict(Counter(str(f["target"]) for f in during).most_common()),
        "cause": _cause_line(stall, active, just_ended, during, exits),
    }


def _end(fault: Mapping[str, Any]) -> float:
    """When a fault ended; one never ended (the run failed under it) lasts for ever."""
    return float(fault["ended_s"]) if "ended_s" in fault else float("inf")


def _described(fault: Mapping[str, Any]) -> dict[str, Any]:
    described = {
        "fault": _fault_name(fault),
        "began_s": fault["began_s"],
        "ended_s": fault.get("ended_s"),
    }
    if "hit" in fault:
        described["hit"] = fault["hit"]
    return described


def _fault_name(fault: Mapping[str, Any]) -> str:
    """ "broker target (node 2)", "network latency replicator@source"."""
    name = " ".join(
        str(part) for part in (fault["kind"], fault.get("variant"), fault["target"]) if part
    )
    return f"{name} (node {fault['node']})" if "node" in fault else name


def _cause_line(
    stall: Stall,
    active: Sequence[Mapping[str, Any]],
    just_ended: Sequence[Mapping[str, Any]],
    during: Sequence[Mapping[str, Any]],
    exits: Sequence[Mapping[str, Any]],
) -> str:
    """ "longest stall 49.0 s, from 17.0 s to 66.0 s: active when it began: broker target
    (node 2) [10.1-21.3 s]; ended just before: kill replicator (2.0 s before); ..."."""
    clauses = []
    if active:
        clauses.append(
            "active when it began: "
            + ", ".join(
                f"{_fault_name(f)} [{f['began_s']}-{f.get('ended_s', '?')} s]" for f in active
            )
        )
    if just_ended:
        clauses.append(
            "ended just before: "
            + ", ".join(
                f"{_fault_name(f)} ({stall.began_s - float(f['ended_s']):.1f} s before)"
                for f in just_ended
            )
        )
    if not clauses:
        clauses.append(
            f"no fault active when it began, none ended in the {AFTERMATH_S:.0f} s before"
        )
    if exits:
        clauses.append(
            "roles exited by themselves: "
            + ", ".join(f"{e['role']} at {e['t']} s (exit {e['status']})" for e in exits)
        )
    if during:
        targets = Counter(str(f["target"]) for f in during)
        top = ", ".join(f"{target} {n}" for target, n in targets.most_common(_TOP_TARGETS))
        more = ", ..." if len(targets) > _TOP_TARGETS else ""
        clauses.append(f"{len(during)} more faults began during it ({top}{more})")
    return (
        f"longest stall {stall.seconds:.1f} s, from {stall.began_s:.1f} s to "
        f"{stall.ended_s:.1f} s: " + "; ".join(clauses)
    )


def role_rows(
    instances: Mapping[str, Instance], drained: Mapping[str, int | None]
) -> dict[str, dict[str, object]]:
    """Each role instance's line of the report: its starts, exits and peak memory."""
    return {
        name: {
            "starts": i.process.starts,
            "unexpected_exits": i.exits,
            "sigterm_exit": drained.get(name),
            "peak_rss_mib": round(i.peak_rss_mib, 1),
        }
        for name, i in instances.items()
    }


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
    stall = longest_stall(samples)
    report: dict[str, Any] = {
        "clean": outcome.clean,
        "options": dataclasses.asdict(options),
        "nodes_per_cluster": options.nodes,
        "faults_planned": planned,
        "faults_injected": sum(applied.values()),
        "faults_by_kind": {kind.value: applied.get(kind.value, 0) for kind in Kind},
        "records_committed": traffic.committed if traffic else 0,
        "records_aborted": traffic.aborted if traffic else 0,
        "records_uncertain": traffic.uncertain if traffic else 0,
        "longest_stall_s": round(stall.seconds, 1) if stall is not None else 0.0,
        # Which faults were active, or had just ended, when the longest stall began.
        "longest_stall": None if stall is None else stall_causes(stall, faults, roles),
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
