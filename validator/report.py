"""The audit's result as a plain dict: the JSON report, and what the table and the chart show.

The verdict is "clean" only when no partition has a discrepancy (and, with
``require_complete``, nothing is still in flight), and "unproven" (no verdict, exit 3) when a
partition holds records to copy on the source and records on the destination but not one of
them matched: the destination's copies name another source cluster, or the two are not a
flow's source and destination, and a clean verdict would prove nothing. Records outside the
checked range are counted and shown but are not discrepancies (docs/design.md §6), and so are
the records no copy is expected of in an active-active pair: looped (source records that are
copies themselves) and local (with ``two_way``, destination records produced on the destination
cluster).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from validator.errors import EXIT_CLEAN, EXIT_DISCREPANCY, EXIT_INCOMPLETE
from validator.kinds import (
    DISCREPANCY_KINDS,
    IN_FLIGHT,
    LOOPED,
    MATCHED,
    NOT_COPIED_KINDS,
    OUTSIDE_KINDS,
)
from validator.snapshot import OffsetRange, Snapshot, TimeRange

# What retention deleting records during the read looks like (_retention_may_explain).
_RETENTION_LOOKALIKES = frozenset({"missing", "unexpected"})

Counts = Mapping[tuple[str, int, str], int]  # (source topic, partition, kind) -> records


def build_report(
    snapshot: Snapshot,
    *,
    modes: Mapping[str, str],
    plans: Mapping[str, str],
    records: Mapping[tuple[str, str, int], int],
    findings: Counts,
    examples: Mapping[str, list[dict[str, Any]]],
    started: datetime,
    finished: datetime,
    master: str,
    require_complete: bool,
    times: TimeRange,
    log_starts_moved: list[str],
    two_way: bool,
    retention_cut: Collection[tuple[str, int]] = (),
) -> dict[str, Any]:
    """``records`` maps (side, source topic, partition) to the records read on that side;
    ``plans`` each source topic to the plan that checked it (validator/audit.py);
    ``retention_cut`` the (source topic, partition) pairs whose log start moved on either side
    while they were read."""
    partitions = _partition_rows(snapshot, modes, records, findings, require_complete)
    totals = _totals(partitions)
    unproven = [
        f"{row['source_topic']}[{row['partition']}]" for row in partitions if _unproven(row)
    ]
    cut = set(retention_cut)
    judged, uncertain = [], []
    for row in partitions:
        if row["clean"]:
            continue
        if _retention_may_explain(row, cut):
            uncertain.append(f"{row['source_topic']}[{row['partition']}]")
        else:
            judged.append(row)
    verdict, status = (
        ("discrepancy", EXIT_DISCREPANCY)
        if judged
        else ("unproven", EXIT_INCOMPLETE)
        if unproven or uncertain
        else ("clean", EXIT_CLEAN)
    )
    return {
        "verdict": verdict,
        "exit_status": status,
        # Partitions with records on both sides of which none matched (verdict "unproven").
        "unproven": unproven,
        # Partitions with findings that retention cut while the audit read them (verdict
        # "unproven" when nothing else is wrong).
        "retention_cut": uncertain,
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "seconds": round((finished - started).total_seconds(), 1),
        "master": master,
        "source": _cluster(snapshot.source),
        "destination": _cluster(snapshot.destination),
        "require_complete": require_complete,
        # Destination records without exactly.origin were local, not unexpected (active-active).
        "two_way": two_way,
        # Milliseconds since the epoch; null: from the earliest offset / to the snapshot.
        "since_ms": times.since,
        "until_ms": times.until,
        # Retention cut these partitions while they were read: findings below the new log start
        # may be retention's, not losses.
        "log_starts_moved": log_starts_moved,
        "topics": [
            {
                "source_topic": pair.source_topic,
                "destination_topic": pair.destination_topic,
                "match": modes[pair.source_topic],
                # merge: proven clean in one read; join: the merge found something to name.
                "plan": plans[pair.source_topic],
            }
            for pair in snapshot.pairs
        ],
        "totals": totals,
        "partitions": partitions,
        "examples": {kind: rows for kind, rows in examples.items() if rows},
    }


def _partition_rows(
    snapshot: Snapshot,
    modes: Mapping[str, str],
    records: Mapping[tuple[str, str, int], int],
    findings: Counts,
    require_complete: bool,
) -> list[dict[str, Any]]:
    """One row of counts for each partition pair, in the snapshot's order."""
    partitions = []
    for pair in snapshot.pairs:
        for p in pair.partitions:
            row: dict[str, Any] = {
                "source_topic": pair.source_topic,
                "destination_topic": pair.destination_topic,
                "partition": p,
                "match": modes[pair.source_topic],
                "source_range": _range(pair.source.get(p)),
                "destination_range": _range(pair.destination.get(p)),
                "source_records": records.get(("source", pair.source_topic, p), 0),
                "destination_records": records.get(("destination", pair.source_topic, p), 0),
                MATCHED: findings.get((pair.source_topic, p, MATCHED), 0),
            }
            for kind in DISCREPANCY_KINDS:
                row[kind] = findings.get((pair.source_topic, p, kind), 0)
            for kind in (IN_FLIGHT, *NOT_COPIED_KINDS):
                row[kind] = findings.get((pair.source_topic, p, kind), 0)
            row["outside_range"] = {
                kind: findings.get((pair.source_topic, p, kind), 0) for kind in OUTSIDE_KINDS
            }
            row["clean"] = _clean(row, require_complete)
            partitions.append(row)
    return partitions


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")


def example_rows(
    rows: Iterable[Mapping[str, Any]], snapshot: Snapshot, *, per_kind: int
) -> dict[str, list[dict[str, Any]]]:
    """The first ``per_kind`` finding rows of each kind, with the destination topic filled in."""
    destination_of = {pair.source_topic: pair.destination_topic for pair in snapshot.pairs}
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if len(grouped.get(row["kind"], ())) >= per_kind:
            continue
        has_destination = row["d_offset"] is not None
        grouped.setdefault(row["kind"], []).append(
            {
                "source_topic": row["topic"],
                "partition": row["partition"],
                "source_offset": row["s_offset"],
                "destination_topic": destination_of[row["topic"]] if has_destination else None,
                "destination_partition": row["d_partition"],
                "destination_offset": row["d_offset"],
                "detail": row["detail"],
            }
        )
    return grouped


def _retention_may_explain(row: Mapping[str, Any], cut: set[tuple[str, int]]) -> bool:
    """Spark read a cut partition without the deleted records: a copy whose source record went
    looks unexpected, a record whose copy went looks missing. Findings of those two kinds alone
    judge nothing there; any other kind (a duplicate, a changed field) retention cannot make."""
    if (row["source_topic"], row["partition"]) not in cut:
        return False
    found = {kind for kind in DISCREPANCY_KINDS if row[kind]}
    return bool(found) and found <= _RETENTION_LOOKALIKES


def _unproven(row: Mapping[str, Any]) -> bool:
    """Records to copy on the source (copies there are looped, not copied again), records on
    the destination, and not one pair: an audit pointed at another source cluster (every copy
    then counts as another origin's and every source record as in flight), or at a destination
    topic no flow of this source writes."""
    to_copy: int = row["source_records"] - row[LOOPED]
    return to_copy > 0 and row["destination_records"] > 0 and row[MATCHED] == 0


def _clean(row: Mapping[str, Any], require_complete: bool) -> bool:
    if any(row[kind] for kind in DISCREPANCY_KINDS):
        return False
    return not (require_complete and row[IN_FLIGHT])


def _totals(partitions: list[dict[str, Any]]) -> dict[str, int]:
    keys = (
        "source_records",
        "destination_records",
        MATCHED,
        *DISCREPANCY_KINDS,
        IN_FLIGHT,
        *NOT_COPIED_KINDS,
    )
    totals = {key: sum(row[key] for row in partitions) for key in keys}
    totals["outside_range"] = sum(sum(row["outside_range"].values()) for row in partitions)
    return totals


def _range(offsets: OffsetRange | None) -> list[int] | None:
    return None if offsets is None else [offsets.start, offsets.end]


def _cluster(cluster: Any) -> dict[str, str]:
    return {"bootstrap_servers": cluster.bootstrap_servers, "cluster_id": cluster.cluster_id}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
