"""A validation report for people: a terminal summary (rich) and one self-contained HTML chart.

Both read the report dict the validator writes as JSON; nothing here decides a verdict, it only
shows the one in the report. The HTML file has no script and no external resource, so it opens
the same from a CI artifact, an e-mail attachment or a machine without network.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from validator.kinds import DISCREPANCY_KINDS, LOCAL, LOOPED, NOT_COPIED_KINDS

# Past about a screenful a table is scrolled, not read; partitions with discrepancies are shown
# whatever their number, clean ones fill the rest.
_MAX_TABLE_ROWS = 40
_MAX_TERMINAL_EXAMPLES = 10  # per kind
_MAX_HTML_EXAMPLES = 100  # per kind: bounds the file when a report carries long example lists

# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), then brown
# and grey, then Okabe-Ito's black for a copied loop.
_KIND_COLOURS: dict[str, str] = dict(
    zip(
        DISCREPANCY_KINDS,
        (
            "#d55e00",
            "#e69f00",
            "#cc79a7",
            "#0072b2",
            "#56b4e9",
            "#009e73",
            "#f0e442",
            "#8c564b",
            "#777777",
            "#000000",
        ),
        strict=True,
    )
)
_SOURCE_COLOUR = "#4c78a8"
_DESTINATION_COLOUR = "#72b7b2"

# Chart geometry, in pixels. Rows have a fixed height and the chart scrolls inside its box, so
# one partition and five hundred read the same way.
_ROW_PX = 24
_BAR_PX = 9
_STACK_ROW_PX = 18
_BAR_AREA_PX = 560
_NUMBER_PX = 80  # room right of the longest bar for its count
_LABEL_CHARS = 40  # longer partition names are cut; the full name is in the hover title
_CHAR_PX = 7.5  # width of one character of the 12 px monospace labels

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; max-width: 1100px; }
h1 { font-size: 1.4rem; }
h1.clean { color: #1a7f37; }
h1.discrepancy { color: #c62828; }
.meta { color: #555; margin: 0.2rem 0; }
.scroll { max-height: 70vh; overflow: auto; border: 1px solid #ddd; padding: 4px; }
svg text { font: 12px ui-monospace, monospace; fill: #222; }
svg text.n { font-size: 9px; fill: #555; }
svg text.bad { fill: #c62828; font-weight: bold; }
.legend { display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; margin: 0.4rem 0; }
.swatch { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.3rem;
          vertical-align: middle; }
.ok { color: #1a7f37; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; }
td.more { color: #555; font-style: italic; }
"""


# -- terminal ---------------------------------------------------------------------------------


def render_table(report: dict[str, Any], console: Console) -> None:
    """Print the per-partition table, examples of each discrepancy, and the verdict line."""
    console.print(Text(_run_line(report), style="dim"), soft_wrap=True)
    console.print(Text(_clusters_line(report), style="dim"), soft_wrap=True)
    partitions = _partitions(report)
    if not partitions:
        console.print(Text("no partitions in the report", style="yellow"))
    else:
        kinds = _kinds_present(partitions)
        shown, hidden = _rows_to_show(partitions)
        console.print(_partition_table(report, shown, kinds))
        if hidden:
            console.print(Text(f"… {hidden:,} more clean partitions", style="dim"))
        omitted = [_label(kind) for kind in DISCREPANCY_KINDS if kind not in kinds]
        if omitted:
            note = f"no {_spoken_list(omitted)} in any partition"
            console.print(Text(note, style="dim"), soft_wrap=True)
    examples = list(_example_lines(report, _MAX_TERMINAL_EXAMPLES))
    if examples:
        console.print(Text("examples", style="bold"))
        for line in examples:
            console.print(Text(f"  {line}", style="red"), soft_wrap=True)
    verdict, clean = _verdict(report)
    console.print(Text(verdict, style="bold green" if clean else "bold red"), soft_wrap=True)


def _partition_table(
    report: Mapping[str, Any], shown: Sequence[Mapping[str, Any]], kinds: Sequence[str]
) -> Table:
    # The destination topic is a column only when a flow renames a topic: otherwise it repeats
    # the source topic on every row.
    renamed = any(_destination_topic(p) != p.get("source_topic") for p in _partitions(report))
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
        *(kind for kind in NOT_COPIED_KINDS if any(_count(p, kind) for p in _partitions(report))),
    ]
    for counter in counters:
        table.add_column(_column_title(counter), justify="right")
    table.add_column("outside range", justify="right")
    table.add_column("status")
    for p in shown:
        clean = _is_clean(p)
        names = [Text(str(p.get("source_topic")))]
        if renamed:
            names.append(Text(str(_destination_topic(p))))
        table.add_row(
            *names,
            str(p.get("partition")),
            str(p.get("match", "")),
            *(f"{_count(p, counter):,}" for counter in counters),
            f"{_outside_total(p.get('outside_range')):,}",
            Text("ok", style="green") if clean else Text("DISCREPANCY", style="bold red"),
            style=None if clean else "red",
        )
    if len(_partitions(report)) > 1:
        table.add_section()
        table.add_row(
            "total",
            *([""] * (2 + renamed)),
            *(f"{_total(report, counter):,}" for counter in counters),
            f"{_outside_total(_totals(report).get('outside_range')):,}",
            "",
            style="bold",
        )
    return table


def _rows_to_show(
    partitions: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], int]:
    """The partitions for the table, in report order, and how many clean ones are left out."""
    dirty = sum(1 for p in partitions if not _is_clean(p))
    room = max(_MAX_TABLE_ROWS - dirty, 0)
    shown: list[Mapping[str, Any]] = []
    for p in partitions:
        if not _is_clean(p):
            shown.append(p)
        elif room > 0:
            shown.append(p)
            room -= 1
    return shown, len(partitions) - len(shown)


def _column_title(counter: str) -> str:
    return {"source_records": "source", "destination_records": "destination"}.get(
        counter, _label(counter)
    )


def _spoken_list(words: Sequence[str]) -> str:
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} or {words[-1]}"


# -- shared wording -----------------------------------------------------------------------------


def _verdict(report: Mapping[str, Any]) -> tuple[str, bool]:
    """The one-line verdict and whether it is clean; the report's own verdict decides."""
    clean = report.get("verdict") == "clean"
    if clean:
        count = len(_partitions(report))
        text = (
            f"EXACTLY ONCE: {_total(report, 'matched'):,} records in {count:,} "
            f"partition{'' if count == 1 else 's'} match"
        )
    else:
        counts = [
            f"{_total(report, kind):,} {_label(kind)}"
            for kind in DISCREPANCY_KINDS
            if _total(report, kind)
        ]
        if counts:
            text = f"DISCREPANCY: {', '.join(counts)}"
        elif report.get("require_complete"):
            # No record differs, but the user asked for every record to be checked.
            text = "DISCREPANCY: not every record could be checked and require_complete is set"
        else:
            text = "DISCREPANCY: see the partitions marked DISCREPANCY"
    in_flight = _total(report, "in_flight")
    if in_flight:
        text += f" ({in_flight:,} records still in flight, not checked)"
    looped = _total(report, LOOPED)
    if looped:
        text += f" ({looped:,} looped: source records that are copies, not copied again)"
    local = _total(report, LOCAL)
    if local:
        text += f" ({local:,} local: produced on the destination cluster)"
    outside = _outside_total(_totals(report).get("outside_range"))
    if outside:
        text += f" ({outside:,} outside the checked range)"
    return text, clean


def _run_line(report: Mapping[str, Any]) -> str:
    seconds = report.get("seconds")
    took = f", {seconds:.1f} s" if isinstance(seconds, int | float) else ""
    return (
        f"audit {report.get('started_at', '?')} → {report.get('finished_at', '?')}"
        f"{took}, spark {report.get('master', '?')}"
        f"{', require_complete' if report.get('require_complete') else ''}"
        f"{', two-way' if report.get('two_way') else ''}"
    )


def _clusters_line(report: Mapping[str, Any]) -> str:
    source, destination = _cluster(report.get("source")), _cluster(report.get("destination"))
    return f"source {source} → destination {destination}"


def _cluster(cluster: Mapping[str, Any] | None) -> str:
    if not cluster:
        return "?"
    return f"{cluster.get('bootstrap_servers', '?')} (cluster {cluster.get('cluster_id', '?')})"


def _example_lines(report: Mapping[str, Any], limit: int) -> Iterator[str]:
    for kind, item in _examples(report, limit):
        if isinstance(item, int):
            yield f"… {item:,} more {_label(kind)}"
        else:
            source, destination, detail = _example_sides(item)
            line = f"{_label(kind)}: {source} → {destination}"
            yield f"{line} — {detail}" if detail else line


def _examples(
    report: Mapping[str, Any], limit: int
) -> Iterator[tuple[str, Mapping[str, Any] | int]]:
    """(kind, example) in display order, then (kind, how many more) when the list is cut."""
    examples = report.get("examples") or {}
    for kind in DISCREPANCY_KINDS:
        items = examples.get(kind) or []
        for item in items[:limit]:
            yield kind, item
        # The report keeps only a few examples of each kind; the count says how many there are.
        more = max(_total(report, kind), len(items)) - min(len(items), limit)
        if items and more > 0:
            yield kind, more


def _example_sides(item: Mapping[str, Any]) -> tuple[str, str, str]:
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


# -- report access ------------------------------------------------------------------------------


def _partitions(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(report.get("partitions") or [])


def _totals(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report.get("totals") or {}


def _total(report: Mapping[str, Any], counter: str) -> int:
    totals = _totals(report)
    if counter in totals:
        return int(totals[counter] or 0)
    return sum(_count(p, counter) for p in _partitions(report))


def _count(partition: Mapping[str, Any], counter: str) -> int:
    return int(partition.get(counter) or 0)


def _outside_total(value: int | Mapping[str, int] | None) -> int:
    """Records outside the checked range: a count per reason in a partition, one sum in totals."""
    if isinstance(value, Mapping):
        return sum(int(n or 0) for n in value.values())
    return int(value or 0)


def _discrepancies(partition: Mapping[str, Any]) -> int:
    return sum(_count(partition, kind) for kind in DISCREPANCY_KINDS)


def _is_clean(partition: Mapping[str, Any]) -> bool:
    return bool(partition.get("clean", _discrepancies(partition) == 0))


def _kinds_present(partitions: Sequence[Mapping[str, Any]]) -> list[str]:
    return [kind for kind in DISCREPANCY_KINDS if any(_count(p, kind) for p in partitions)]


def _destination_topic(partition: Mapping[str, Any]) -> Any:
    return partition.get("destination_topic") or partition.get("source_topic")


def _partition_name(partition: Mapping[str, Any]) -> str:
    source = partition.get("source_topic")
    destination = _destination_topic(partition)
    topic = source if destination == source else f"{source} → {destination}"
    return f"{topic}[{partition.get('partition')}]"


def _label(kind: str) -> str:
    return kind.replace("_", " ")


# -- HTML -----------------------------------------------------------------------------------------


def write_chart(report: dict[str, Any], path: Path) -> None:
    """Write one self-contained HTML file (inline SVG and CSS, no script) showing the report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_chart_html(report), encoding="utf-8")


def _chart_html(report: Mapping[str, Any]) -> str:
    verdict, clean = _verdict(report)
    partitions = _partitions(report)
    title = f"{verdict} — {report.get('finished_at', '')}"
    return "\n".join(
        (
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{_e(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            f'<h1 class="{"clean" if clean else "discrepancy"}">{_e(verdict)}</h1>',
            f'<p class="meta">{_e(_run_line(report))}</p>',
            f'<p class="meta">{_e(_clusters_line(report))}</p>',
            _topics_html(report),
            "<h2>Records per partition</h2>",
            _legend_html(
                "legend-records",
                (("source records", _SOURCE_COLOUR), ("destination records", _DESTINATION_COLOUR)),
            ),
            _records_svg(partitions),
            "<h2>Discrepancies per partition</h2>",
            _discrepancies_html(partitions),
            "<h2>Examples</h2>",
            _examples_html(report),
            "</body>",
            "</html>",
            "",
        )
    )


def _topics_html(report: Mapping[str, Any]) -> str:
    flows = [
        f"{t.get('source_topic')} → {t.get('destination_topic')} ({t.get('match')})"
        for t in report.get("topics") or []
    ]
    if not flows:
        return ""
    return f'<p class="meta">topics: {_e("; ".join(flows))}</p>'


def _legend_html(legend_id: str, keys: Sequence[tuple[str, str]]) -> str:
    items = "".join(
        f'<span><span class="swatch" style="background:{colour}"></span>{_e(name)}</span>'
        for name, colour in keys
    )
    return f'<div class="legend" id="{legend_id}">{items}</div>'


def _records_svg(partitions: Sequence[Mapping[str, Any]]) -> str:
    if not partitions:
        return "<p>No partitions in the report.</p>"
    label_px = _label_px(partitions)
    peak = max(
        max(_count(p, "source_records"), _count(p, "destination_records")) for p in partitions
    )
    elements: list[str] = []
    for row, p in enumerate(partitions):
        y = 4 + row * _ROW_PX
        elements.append(_row_label(p, label_px, y + _BAR_PX + 4))
        sides = (
            ("source", "source_records", "source_range", _SOURCE_COLOUR),
            ("destination", "destination_records", "destination_range", _DESTINATION_COLOUR),
        )
        for offset, (side, counter, range_key, colour) in enumerate(sides):
            value = _count(p, counter)
            width = _scaled(value, peak)
            bar_y = y + offset * (_BAR_PX + 1)
            hover = f"{_partition_name(p)} {side}: {value:,} records{_range_text(p.get(range_key))}"
            elements.append(
                f'<rect x="{label_px}" y="{bar_y}" width="{width:.1f}" height="{_BAR_PX}" '
                f'fill="{colour}"><title>{_e(hover)}</title></rect>'
            )
            elements.append(
                f'<text class="n" x="{label_px + width + 4:.1f}" y="{bar_y + _BAR_PX - 1}">'
                f"{_e(f'{value:,}')}</text>"
            )
    height = 8 + len(partitions) * _ROW_PX
    return _svg(label_px + _BAR_AREA_PX + _NUMBER_PX, height, "records per partition", elements)


def _discrepancies_html(partitions: Sequence[Mapping[str, Any]]) -> str:
    dirty = [p for p in partitions if _discrepancies(p)]
    if not dirty:
        return f'<p class="ok">No discrepancies in any of the {len(partitions):,} partitions.</p>'
    kinds = _kinds_present(dirty)
    legend = _legend_html(
        "legend-discrepancies", [(_label(kind), _KIND_COLOURS[kind]) for kind in kinds]
    )
    # Only the partitions with discrepancies are drawn: among hundreds of clean rows a few bad
    # ones would have to be searched for.
    caption = (
        f"<p>{len(dirty):,} of {len(partitions):,} partitions have discrepancies; "
        "clean partitions are not drawn.</p>"
    )
    label_px = _label_px(dirty)
    peak = max(_discrepancies(p) for p in dirty)
    elements: list[str] = []
    for row, p in enumerate(dirty):
        y = 4 + row * _STACK_ROW_PX
        elements.append(_row_label(p, label_px, y + _BAR_PX + 2))
        x = float(label_px)
        for kind in kinds:
            value = _count(p, kind)
            if not value:
                continue
            width = _scaled(value, peak)
            hover = f"{_partition_name(p)} {_label(kind)}: {value:,}"
            elements.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{_STACK_ROW_PX - 4}" '
                f'fill="{_KIND_COLOURS[kind]}"><title>{_e(hover)}</title></rect>'
            )
            x += width
        elements.append(
            f'<text class="n" x="{x + 4:.1f}" y="{y + _BAR_PX + 2}">'
            f"{_e(f'{_discrepancies(p):,}')}</text>"
        )
    height = 8 + len(dirty) * _STACK_ROW_PX
    svg = _svg(
        label_px + _BAR_AREA_PX + _NUMBER_PX, height, "discrepancies per partition", elements
    )
    return "\n".join((legend, caption, svg))


def _examples_html(report: Mapping[str, Any]) -> str:
    rows: list[str] = []
    for kind, item in _examples(report, _MAX_HTML_EXAMPLES):
        if isinstance(item, int):
            rows.append(
                f'<tr><td>{_e(_label(kind))}</td><td class="more" colspan="3">'
                f"{_e(f'… {item:,} more')}</td></tr>"
            )
            continue
        cells = (_label(kind), *_example_sides(item))
        rows.append("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in cells) + "</tr>")
    if not rows:
        return "<p>No examples in the report.</p>"
    head = "<tr><th>kind</th><th>source</th><th>destination</th><th>detail</th></tr>"
    return f"<table>\n{head}\n" + "\n".join(rows) + "\n</table>"


def _row_label(partition: Mapping[str, Any], label_px: int, baseline: int) -> str:
    name = _partition_name(partition)
    shown = name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"
    not_copied = "".join(
        f", {_count(partition, kind):,} {kind}"
        for kind in NOT_COPIED_KINDS
        if _count(partition, kind)
    )
    hover = (
        f"{name}: {_count(partition, 'matched'):,} matched, "
        f"{_count(partition, 'in_flight'):,} in flight{not_copied}, "
        f"{_outside_total(partition.get('outside_range')):,} outside the checked range"
    )
    css = "" if _is_clean(partition) else ' class="bad"'
    return (
        f'<text x="{label_px - 8}" y="{baseline}" text-anchor="end"{css}>'
        f"{_e(shown)}<title>{_e(hover)}</title></text>"
    )


def _svg(width: float, height: int, label: str, elements: Sequence[str]) -> str:
    return (
        f'<div class="scroll"><svg width="{width:.0f}" height="{height}" role="img" '
        f'aria-label="{_e(label)}">\n' + "\n".join(elements) + "\n</svg></div>"
    )


def _label_px(partitions: Sequence[Mapping[str, Any]]) -> int:
    longest = max(min(len(_partition_name(p)), _LABEL_CHARS) for p in partitions)
    return int(longest * _CHAR_PX) + 16


def _scaled(value: int, peak: int) -> float:
    if value <= 0 or peak <= 0:
        return 0.0
    # A count of one among millions still gets a visible sliver.
    return max(value / peak * _BAR_AREA_PX, 1.0)


def _range_text(offsets: Sequence[int] | None) -> str:
    if not offsets or len(offsets) != 2:
        return ""
    # The validator's ranges are half-open, [start, end), like Kafka's end offsets.
    return f", offsets [{offsets[0]}, {offsets[1]})"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
