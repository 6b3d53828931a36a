"""The report dict the validator writes, read and worded for people: the verdict line, the run
and cluster lines, the examples, and each partition's counts. The terminal summary
(validator/render.py) and the HTML chart (validator/chart.py) say the same with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from validator.kinds import DISCREPANCY_KINDS, LOCAL, LOOPED


def _named(partitions: Sequence[str]) -> str:
    more = len(partitions) - 5
    return ", ".join(partitions[:5]) + (f" and {more} more" if more > 0 else "")


def verdict_of(report: Mapping[str, Any]) -> tuple[str, bool]:
    """The one-line verdict and whether it is clean; the report's own verdict decides."""
    clean = report.get("verdict") == "clean"
    if clean:
        count = len(partitions_of(report))
        text = (
            f"EXACTLY ONCE: {total(report, 'matched'):,} records in {count:,} "
            f"partition{'' if count == 1 else 's'} match"
        )
    elif report.get("verdict") == "unproven":
        reasons = []
        if unproven := list(report.get("unproven", ())):
            reasons.append(
                f"not one record matched in {_named(unproven)}, which hold records on both "
                "sides: the destination's copies name another source cluster than "
                f"{report.get('source', {}).get('cluster_id', 'the source')}, or these topics "
                "are not one flow's source and destination"
            )
        if cut := list(report.get("retention_cut", ())):
            reasons.append(
                f"retention deleted records of {_named(cut)} while the audit read them, so its "
                "findings there may be retention's: audit again with a later --since"
            )
        text = "NO VERDICT: " + "; ".join(reasons)
    else:
        counts = [
            f"{total(report, kind):,} {label(kind)}"
            for kind in DISCREPANCY_KINDS
            if total(report, kind)
        ]
        if counts:
            text = f"DISCREPANCY: {', '.join(counts)}"
        elif report.get("require_complete"):
            # No record differs, but the user asked for every record to be checked.
            text = "DISCREPANCY: not every record could be checked and require_complete is set"
        else:
            text = "DISCREPANCY: see the partitions marked DISCREPANCY"
    in_flight = total(report, "in_flight")
    if in_flight:
        text += f" ({in_flight:,} records still in flight, not checked)"
    looped = total(report, LOOPED)
    if looped:
        text += f" ({looped:,} looped: source records that are copies, not copied again)"
    local = total(report, LOCAL)
    if local:
        text += f" ({local:,} local: produced on the destination cluster)"
    outside = outside_total(totals_of(report).get("outside_range"))
    if outside:
        text += f" ({outside:,} outside the checked range)"
    return text, clean


def run_line(report: Mapping[str, Any]) -> str:
    seconds = report.get("seconds")
    took = f", {seconds:.1f} s" if isinstance(seconds, int | float) else ""
    return (
        f"audit {report.get('started_at', '?')} → {report.get('finished_at', '?')}"
        f"{took}, spark {report.get('master', '?')}"
        f"{', require_complete' if report.get('require_complete') else ''}"
        f"{', two-way' if report.get('two_way') else ''}"
    )


def clusters_line(report: Mapping[str, Any]) -> str:
    source, destination = _cluster(report.get("source")), _cluster(report.get("destination"))
    return f"source {source} → destination {destination}"


def _cluster(cluster: Mapping[str, Any] | None) -> str:
    if not cluster:
        return "?"
    return f"{cluster.get('bootstrap_servers', '?')} (cluster {cluster.get('cluster_id', '?')})"


def example_lines(report: Mapping[str, Any], limit: int) -> Iterator[str]:
    for kind, item in examples_of(report, limit):
        if isinstance(item, int):
            yield f"… {item:,} more {label(kind)}"
        else:
            source, destination, detail = example_sides(item)
            line = f"{label(kind)}: {source} → {destination}"
            yield f"{line} — {detail}" if detail else line


def examples_of(
    report: Mapping[str, Any], limit: int
) -> Iterator[tuple[str, Mapping[str, Any] | int]]:
    """(kind, example) in display order, then (kind, how many more) when the list is cut."""
    examples = report.get("examples") or {}
    for kind in DISCREPANCY_KINDS:
        items = examples.get(kind) or []
        for item in items[:limit]:
            yield kind, item
        # The report keeps only a few examples of each kind; the count says how many there are.
        more = max(total(report, kind), len(items)) - min(len(items), limit)
        if items and more > 0:
            yield kind, more


def example_sides(item: Mapping[str, Any]) -> tuple[str, str, str]:
    """The source side, the destination side and the detail of one example, as text."""
    topic = item.get("source_topic")
    where = f"{topic}[{item.get('partition')}] " if topic is not None else ""
    offset = item.get("source_offset")
    source = f"{where}source offset {offset}" if offset is not None else f"{where}source (none)"
    d_offset = item.get("destination_offset")
    if d_offset is None:
        destination = "destination (none)"
    else:
        d_partition = item.get("destination_partition")
        d_where = f"{item.get('destination_topic')}[{'?' if d_partition is None else d_partition}]"
        destination = f"destination {d_where} offset {d_offset}"
    return source, destination, str(item.get("detail") or "")


def partitions_of(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(report.get("partitions") or [])


def totals_of(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report.get("totals") or {}


def total(report: Mapping[str, Any], counter: str) -> int:
    totals = totals_of(report)
    if counter in totals:
        return int(totals[counter] or 0)
    return sum(count_of(p, counter) for p in partitions_of(report))


def count_of(partition: Mapping[str, Any], counter: str) -> int:
    return int(partition.get(counter) or 0)


def outside_total(value: int | Mapping[str, int] | None) -> int:
    """Records outside the checked range: a count per reason in a partition, one sum in totals."""
    if isinstance(value, Mapping):
        return sum(int(n or 0) for n in value.values())
    return int(value or 0)


def discrepancies(partition: Mapping[str, Any]) -> int:
    return sum(count_of(partition, kind) for kind in DISCREPANCY_KINDS)


def is_clean(partition: Mapping[str, Any]) -> bool:
    return bool(partition.get("clean", discrepancies(partition) == 0))


def kinds_present(partitions: Sequence[Mapping[str, Any]]) -> list[str]:
    return [kind for kind in DISCREPANCY_KINDS if any(count_of(p, kind) for p in partitions)]


def destination_topic(partition: Mapping[str, Any]) -> Any:
    return partition.get("destination_topic") or partition.get("source_topic")


def partition_name(partition: Mapping[str, Any]) -> str:
    source = partition.get("source_topic")
    destination = destination_topic(partition)
    topic = source if destination == source else f"{source} → {destination}"
    return f"{topic}[{partition.get('partition')}]"


def label(kind: str) -> str:
    return kind.replace("_", " ")
