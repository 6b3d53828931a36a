"""The chaos report as one self-contained HTML page: the verdicts first, then the faults on a
timeline over the records committed at the source and copied to the destination, each role's
starts and exits, and the failover. Made from the JSON report alone (nothing else is read), with
inline SVG: no script, no stylesheet or font from the network, so it opens anywhere."""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HTML_NAME = "chaos-report.html"

_WIDTH, _LEFT, _RIGHT = 960, 120, 20
_LANE_H, _CHART_H = 18, 180
_KIND_COLOURS = {
    "kill": "#d62728",
    "pause": "#9467bd",
    "wipe": "#8c564b",
    "broker": "#ff7f0e",
    "controller": "#e377c2",
    "network": "#17becf",
}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1000px; }
h1.clean { color: #1a7f37; } h1.dirty { color: #cf222e; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
svg text { font-size: 11px; fill: #444; }
.legend span { display: inline-block; margin-right: 1em; }
.legend i { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.3em; }
"""


def write_html(report: Mapping[str, Any], report_dir: Path) -> Path:
    path = report_dir / HTML_NAME
    path.write_text(render(report), encoding="utf-8")
    return path


def render(report: Mapping[str, Any]) -> str:
    clean = bool(report.get("clean"))
    title = "CHAOS RUN CLEAN" if clean else "CHAOS RUN NOT CLEAN"
    options = report.get("options", {})
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>kafka-exactly chaos report: {_e(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f'<h1 class="{"clean" if clean else "dirty"}">{_e(title)}</h1>',
        f"<p>{_e(_options_line(report))}</p>",
        _verdicts(report),
        "<h2>Faults and records over time</h2>",
        _legend(),
        _timeline_svg(
            report.get("fault_timeline", []),
            report.get("samples", []),
            options,
            report.get("longest_stall"),
        ),
        "<h2>Figures</h2>",
        _figures(report),
        "<h2>Roles</h2>",
        _roles(report.get("roles", {})),
        "<h2>Faults</h2>",
        _fault_table(report.get("fault_timeline", [])),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _options_line(report: Mapping[str, Any]) -> str:
    options = report.get("options", {})
    faults = options.get("faults")
    asked = (
        f"{faults} faults"
        if faults is not None
        else f"{report.get('faults_planned')} faults (the default for the window)"
    )
    nodes = report.get("nodes_per_cluster", options.get("nodes", 1))
    layout = f"{nodes} nodes per cluster" if nodes != 1 else "one broker per cluster"
    return (
        f"{options.get('minutes')} min, {asked}, {options.get('rate')} records/s, "
        f"seed {options.get('seed')}, {layout}"
    )


def _verdicts(report: Mapping[str, Any]) -> str:
    rows = []
    verdict = report.get("verdict")
    rows.append(
        ("record by record", verdict["headline"] if verdict else "no verdict (the run failed)")
    )
    validate = report.get("validate")
    if validate is not None:
        rows.append(("exactly validate", validate.get("headline", "")))
    for group, failover in report.get("failovers", {}).items():
        exact = "EXACT" if failover.get("exact") else "NOT EXACT"
        rows.append(
            (
                f"failover of {group}",
                f"{exact}: {failover.get('partitions')} partitions, "
                f"{failover.get('re_read')} read again, {failover.get('skipped')} skipped",
            )
        )
    for group, error in report.get("failover_errors", {}).items():
        rows.append((f"failover of {group}", f"FAILED: {error}"))
    for link, reason in report.get("unhealed_links", {}).items():
        rows.append((f"network link {link}", f"NOT HEALED after the window: {reason}"))
    body = "".join(f"<tr><th>{_e(name)}</th><td>{_e(text)}</td></tr>" for name, text in rows)
    return f"<table>{body}</table>"


def _figures(report: Mapping[str, Any]) -> str:
    by_kind = report.get("faults_by_kind", {})
    figures = [
        ("faults injected", f"{report.get('faults_injected')} of {report.get('faults_planned')}"),
        ("by kind", ", ".join(f"{kind} {count}" for kind, count in by_kind.items())),
        ("records committed at the source", report.get("records_committed")),
        ("records in aborted transactions", report.get("records_aborted")),
        ("records of unknown outcome", report.get("records_uncertain")),
        ("longest stall (s)", report.get("longest_stall_s")),
        ("what the longest stall began under", _stall_cause(report.get("longest_stall"))),
        ("drain after the last fault (s)", report.get("drain_s")),
    ]
    live = report.get("live_group")
    if live:
        figures.append(
            (
                "live consumer group on the source",
                f"{live.get('processed')} records processed, {live.get('commits')} commits, "
                f"{live.get('failed_commits')} failed under faults",
            )
        )
    body = "".join(f"<tr><th>{_e(name)}</th><td>{_e(value)}</td></tr>" for name, value in figures)
    return f"<table>{body}</table>"


def _stall_cause(stall: Mapping[str, Any] | None) -> str:
    if not stall:
        return "-"
    cause = str(stall.get("cause", ""))
    # The figure names the stall already; the cause line repeats its length and times first.
    return cause.split(": ", 1)[1] if ": " in cause else cause


def _roles(roles: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        "<tr><th>role</th><th>starts</th><th>exits by itself (t s: status)</th>"
        "<th>SIGTERM exit</th><th>peak RSS (MiB)</th></tr>"
    )
    rows = []
    for name, role in roles.items():
        exits = ", ".join(f"{e['t']}: {e['status']}" for e in role.get("unexpected_exits", []))
        rows.append(
            f"<tr><td>{_e(name)}</td><td>{_e(role.get('starts'))}</td><td>{_e(exits or '-')}</td>"
            f"<td>{_e(role.get('sigterm_exit'))}</td><td>{_e(role.get('peak_rss_mib'))}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _fault_table(faults: Sequence[Mapping[str, Any]]) -> str:
    head = "<tr><th>kind</th><th>target</th><th>took</th><th>began (s)</th><th>ended (s)</th></tr>"
    rows = "".join(
        f"<tr><td>{_e(_kind(f))}</td><td>{_e(f['target'])}</td><td>{_e(f.get('hit', '-'))}</td>"
        f"<td>{_e(f.get('began_s', '-'))}</td><td>{_e(_end_of(f))}</td></tr>"
        for f in faults
    )
    return f"<table>{head}{rows}</table>"


def _end_of(fault: Mapping[str, Any]) -> object:
    if "skipped" in fault:
        return f"skipped: {fault['skipped']}"
    return fault.get("ended_s", "-")


def _legend() -> str:
    items = "".join(
        f'<span><i style="background:{colour}"></i>{_e(kind)}</span>'
        for kind, colour in _KIND_COLOURS.items()
    )
    lines = (
        '<span><i style="background:#1f77b4"></i>committed at the source</span>'
        '<span><i style="background:#2ca02c"></i>on the destination</span>'
    )
    return f'<p class="legend">{items}{lines}</p>'


def _timeline_svg(
    faults: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, float]],
    options: Mapping[str, Any],
    stall: Mapping[str, Any] | None = None,
) -> str:
    """One lane per fault target with a bar per fault, above the counts over time; the longest
    stall shaded across both."""
    window = float(options.get("minutes") or 1) * 60
    end = max([window, *(float(s["t"]) for s in samples), *(_ended(f) for f in faults)])
    targets = sorted({str(f["target"]) for f in faults})
    lanes_h = _LANE_H * len(targets)
    height = lanes_h + _CHART_H + 40
    plot_w = _WIDTH - _LEFT - _RIGHT

    def x(t: float) -> float:
        return _LEFT + plot_w * t / end if end else _LEFT

    shapes = _lanes(faults, targets, stall, x, lanes_h)
    shapes += _counts_chart(samples, x, lanes_h + 10, end)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'role="img" aria-label="faults and records over time">{"".join(shapes)}</svg>'
    )


def _lanes(
    faults: Sequence[Mapping[str, Any]],
    targets: list[str],
    stall: Mapping[str, Any] | None,
    x: Callable[[float], float],
    lanes_h: int,
) -> list[str]:
    """A lane per fault target with a bar per fault; the longest stall shaded."""
    shapes: list[str] = []
    if stall:
        began, ended = float(stall["began_s"]), float(stall["ended_s"])
        shapes.append(
            f'<rect x="{x(began):.1f}" y="0" width="{max(x(ended) - x(began), 1.5):.1f}" '
            f'height="{lanes_h + 10 + _CHART_H}" fill="#f2f2f2"><title>longest stall: '
            f"{began:.1f}-{ended:.1f} s</title></rect>"
        )
    for row, target in enumerate(targets):
        y = row * _LANE_H
        shapes.append(f'<text x="4" y="{y + 13}">{_e(target)}</text>')
        shapes.append(
            f'<line x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{y + _LANE_H}" '
            f'y2="{y + _LANE_H}" stroke="#eee"/>'
        )
    for fault in faults:
        if "skipped" in fault:
            continue
        began = float(fault.get("began_s", fault.get("planned_at_s", 0)))
        y = targets.index(str(fault["target"])) * _LANE_H + 3
        colour = _KIND_COLOURS.get(str(fault["kind"]), "#999")
        width = max(x(_ended(fault)) - x(began), 1.5)
        shapes.append(
            f'<rect x="{x(began):.1f}" y="{y}" width="{width:.1f}" height="{_LANE_H - 6}" '
            f'fill="{colour}"><title>{_e(_kind(fault))} {_e(fault["target"])}: '
            f"{began:.1f}-{_ended(fault):.1f} s</title></rect>"
        )
    return shapes


def _counts_chart(
    samples: Sequence[Mapping[str, float]], x: Callable[[float], float], top: int, end: float
) -> list[str]:
    """The committed and destination counts over time, below the lanes from ``top`` down."""
    shapes: list[str] = []
    peak = max((max(s["committed"], s["destination"]) for s in samples), default=0) or 1

    def y_of(count: float) -> float:
        return top + _CHART_H - _CHART_H * count / peak

    for name, colour in (("committed", "#1f77b4"), ("destination", "#2ca02c")):
        points = " ".join(f"{x(s['t']):.1f},{y_of(s[name]):.1f}" for s in samples)
        if points:
            shapes.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            )
    shapes.append(f'<text x="4" y="{top + 10}">{int(peak):,} records</text>')
    shapes.append(f'<text x="4" y="{top + _CHART_H}">0</text>')
    for t in _ticks(end):
        shapes.append(
            f'<text x="{x(t):.1f}" y="{top + _CHART_H + 18}" text-anchor="middle">{t:g} s</text>'
        )
    rates = _rates(samples)
    if rates:
        best = max(rate for _, rate in rates)
        shapes.append(
            f'<text x="{_WIDTH - _RIGHT}" y="{top + 10}" text-anchor="end">'
            f"destination gained up to {best:,.0f} records/s between samples</text>"
        )
    return shapes


def _kind(fault: Mapping[str, Any]) -> str:
    """ "network blackhole", "kill": the kind with its variant, if any."""
    return " ".join(str(part) for part in (fault["kind"], fault.get("variant")) if part)


def _ended(fault: Mapping[str, Any]) -> float:
    if "ended_s" in fault:
        return float(fault["ended_s"])
    return float(fault.get("began_s", fault.get("planned_at_s", 0))) + float(fault.get("hold_s", 0))


def _ticks(end: float) -> list[float]:
    step = next((s for s in (5, 10, 15, 30, 60, 120, 300) if end / s <= 12), 600)
    return [float(t) for t in range(0, int(end) + 1, step)]


def _rates(samples: Sequence[Mapping[str, float]]) -> list[tuple[float, float]]:
    """Records/s reaching the destination between consecutive samples."""
    return [
        (b["t"], (b["destination"] - a["destination"]) / (b["t"] - a["t"]))
        for a, b in itertools.pairwise(samples)
        if b["t"] > a["t"]
    ]
