"""A validation report for people in a terminal (rich): the per-partition table, examples of
each discrepancy and the verdict line. The HTML chart is validator/chart.py; both word the report
the same way (validator/report_text.py).

It reads the report dict the validator writes as JSON; nothing here decides a verdict, it only
shows the one in the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from validator.kinds import DISCREPANCY_KINDS, NOT_COPIED_KINDS
from validator.report_text import (
    clusters_line,
    count_of,
    destination_topic,
    example_lines,
    is_clean,
    kinds_present,
    label,
    outside_total,
    partitions_of,
    run_line,
    total,
    totals_of,
    verdict_of,
)

# Past about a screenful a table is scrolled, not read; partitions with discrepancies are shown
# whatever their number, clean ones fill the rest.
_MAX_TABLE_ROWS = 40
_MAX_TERMINAL_EXAMPLES = 10  # per kind


def render_table(report: dict[str, Any], console: Console) -> None:
    """Print the per-partition table, examples of each discrepancy, and the verdict line."""
    console.print(Text(run_line(report), style="dim"), soft_wrap=True)
    console.print(Text(clusters_line(report), style="dim"), soft_wrap=True)
    partitions = partitions_of(report)
    if not partitions:
        console.print(Text("no partitions in the report", style="yellow"))
    else:
        kinds = kinds_present(partitions)
        shown, hidden = _rows_to_show(partitions)
        console.print(_partition_table(report, shown, kinds))
        if hidden:
            console.print(Text(f"… {hidden:,} more clean partitions", style="dim"))
        omitted = [label(kind) for kind in DISCREPANCY_KINDS if kind not in kinds]
        if omitted:
            note = f"no {_spoken_list(omitted)} in any partition"
            console.print(Text(note, style="dim"), soft_wrap=True)
    examples = list(example_lines(report, _MAX_TERMINAL_EXAMPLES))
    if examples:
        console.print(Text("examples", style="bold"))
        for line in examples:
            console.print(Text(f"  {line}", style="red"), soft_wrap=True)
    verdict, clean = verdict_of(report)
    console.print(Text(verdict, style="bold green" if clean else "bold red"), soft_wrap=True)


def _partition_table(
    report: Mapping[str, Any], shown: Sequence[Mapping[str, Any]], kinds: Sequence[str]
) -> Table:
    # The destination topic is a column only when a flow renames a topic: otherwise it repeats
    # the source topic on every row.
    renamed = any(destination_topic(p) != p.get("source_topic") for p in partitions_of(report))
    table = Table(title="source against destination, record by record", title_justify="left")
    table.add_column("source topic")
    if renamed:
        table.add_column("destination topic")
    table.add_column("partition", justify="right")
    table.add_column("match")
    counters = [
        "source_records",
        "destination_records",
        "matched",
        *kinds,
        "in_flight",
        # Active-active: shown only when some partition has them, like the discrepancies.
        *(
            kind
            for kind in NOT_COPIED_KINDS
            if any(count_of(p, kind) for p in partitions_of(report))
        ),
    ]
    for counter in counters:
        table.add_column(_column_title(counter), justify="right")
    table.add_column("outside range", justify="right")
    table.add_column("status")
    for p in shown:
        clean = is_clean(p)
        names = [Text(str(p.get("source_topic")))]
        if renamed:
            names.append(Text(str(destination_topic(p))))
        table.add_row(
            *names,
            str(p.get("partition")),
            str(p.get("match", "")),
            *(f"{count_of(p, counter):,}" for counter in counters),
            f"{outside_total(p.get('outside_range')):,}",
            Text("ok", style="green") if clean else Text("DISCREPANCY", style="bold red"),
            style=None if clean else "red",
        )
    if len(partitions_of(report)) > 1:
        table.add_section()
        table.add_row(
            "total",
            *([""] * (2 + renamed)),
            *(f"{total(report, counter):,}" for counter in counters),
            f"{outside_total(totals_of(report).get('outside_range')):,}",
            "",
            style="bold",
        )
    return table


def _rows_to_show(
    partitions: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], int]:
    """The partitions for the table, in report order, and how many clean ones are left out."""
    dirty = sum(1 for p in partitions if not is_clean(p))
    room = max(_MAX_TABLE_ROWS - dirty, 0)
    shown: list[Mapping[str, Any]] = []
    for p in partitions:
        if not is_clean(p):
            shown.append(p)
        elif room > 0:
            shown.append(p)
            room -= 1
    return shown, len(partitions) - len(shown)


def _column_title(counter: str) -> str:
    return {"source_records": "source", "destination_records": "destination"}.get(
        counter, label(counter)
    )


def _spoken_list(words: Sequence[str]) -> str:
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} or {words[-1]}"
