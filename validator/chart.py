"""A validation report as one self-contained HTML chart: inline SVG and CSS, no script and no
external resource, so it opens the same from a CI artifact, an e-mail attachment or a machine
without network.

It reads the report dict the validator writes as JSON; nothing here decides a verdict, it only
shows the one in the report (worded as validator/report_text.py words it).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from validator.kinds import DISCREPANCY_KINDS, NOT_COPIED_KINDS
from validator.report_text import (
    clusters_line,
    count_of,
    discrepancies,
    example_sides,
    examples_of,
    is_clean,
    kinds_present,
    label,
    outside_total,
    partition_name,
    partitions_of,
    run_line,
    verdict_of,
)

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


def write_chart(report: dict[str, Any], path: Path) -> None:
    """Write one self-contained HTML file (inline SVG and CSS, no script) showing the report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_chart_html(report), encoding="utf-8")


def _chart_html(report: Mapping[str, Any]) -> str:
    verdict, clean = verdict_of(report)
    partitions = partitions_of(report)
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
            f'<p class="meta">{_e(run_line(report))}</p>',
            f'<p class="meta">{_e(clusters_line(report))}</p>',
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
        max(count_of(p, "source_records"), count_of(p, "destination_records")) for p in partitions
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
            value = count_of(p, counter)
            width = _scaled(value, peak)
            bar_y = y + offset * (_BAR_PX + 1)
            hover = f"{partition_name(p)} {side}: {value:,} records{_range_text(p.get(range_key))}"
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
    dirty = [p for p in partitions if discrepancies(p)]
    if not dirty:
        return f'<p class="ok">No discrepancies in any of the {len(partitions):,} partitions.</p>'
    kinds = kinds_present(dirty)
    legend = _legend_html(
        "legend-discrepancies", [(label(kind), _KIND_COLOURS[kind]) for kind in kinds]
    )
    # Only the partitions with discrepancies are drawn: among hundreds of clean rows a few bad
    # ones would have to be searched for.
    caption = (
        f"<p>{len(dirty):,} of {len(partitions):,} partitions have discrepancies; "
        "clean partitions are not drawn.</p>"
    )
    label_px = _label_px(dirty)
    peak = max(discrepancies(p) for p in dirty)
    elements: list[str] = []
    for row, p in enumerate(dirty):
        y = 4 + row * _STACK_ROW_PX
        elements.append(_row_label(p, label_px, y + _BAR_PX + 2))
        x = float(label_px)
        for kind in kinds:
            value = count_of(p, kind)
            if not value:
                continue
            width = _scaled(value, peak)
            hover = f"{partition_name(p)} {label(kind)}: {value:,}"
            elements.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{_STACK_ROW_PX - 4}" '
                f'fill="{_KIND_COLOURS[kind]}"><title>{_e(hover)}</title></rect>'
            )
            x += width
        elements.append(
            f'<text class="n" x="{x + 4:.1f}" y="{y + _BAR_PX + 2}">'
            f"{_e(f'{discrepancies(p):,}')}</text>"
        )
    height = 8 + len(dirty) * _STACK_ROW_PX
    svg = _svg(
        label_px + _BAR_AREA_PX + _NUMBER_PX, height, "discrepancies per partition", elements
    )
    return "\n".join((legend, caption, svg))


def _examples_html(report: Mapping[str, Any]) -> str:
    rows: list[str] = []
    for kind, item in examples_of(report, _MAX_HTML_EXAMPLES):
        if isinstance(item, int):
            rows.append(
                f'<tr><td>{_e(label(kind))}</td><td class="more" colspan="3">'
                f"{_e(f'… {item:,} more')}</td></tr>"
            )
            continue
        cells = (label(kind), *example_sides(item))
        rows.append("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in cells) + "</tr>")
    if not rows:
        return "<p>No examples in the report.</p>"
    head = "<tr><th>kind</th><th>source</th><th>destination</th><th>detail</th></tr>"
    return f"<table>\n{head}\n" + "\n".join(rows) + "\n</table>"


def _row_label(partition: Mapping[str, Any], label_px: int, baseline: int) -> str:
    name = partition_name(partition)
    shown = name if len(name) <= _LABEL_CHARS else name[: _LABEL_CHARS - 1] + "…"
    not_copied = "".join(
        f", {count_of(partition, kind):,} {kind}"
        for kind in NOT_COPIED_KINDS
        if count_of(partition, kind)
    )
    hover = (
        f"{name}: {count_of(partition, 'matched'):,} matched, "
        f"{count_of(partition, 'in_flight'):,} in flight{not_copied}, "
        f"{outside_total(partition.get('outside_range')):,} outside the checked range"
    )
    css = "" if is_clean(partition) else ' class="bad"'
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
    longest = max(min(len(partition_name(p)), _LABEL_CHARS) for p in partitions)
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
