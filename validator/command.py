"""`exactly validate` (also `python -m validator`, and `spark-submit validator/submit.py`).

Configured by the roles' environment variables; the flags below override them for one run.
Exit status: 0 clean, 1 discrepancy, 2 bad input (one line says which), 3 no verdict (the audit
could not finish).
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from validator.errors import EXIT_BAD_INPUT, EXIT_INCOMPLETE, ValidatorError

if TYPE_CHECKING:
    from runtime.settings import Settings

_OVERRIDES = {
    "source": "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS",
    "destination": "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS",
    "include": "REPLICATION_TOPICS_INCLUDE",
    "exclude": "REPLICATION_TOPICS_EXCLUDE",
}


# ParamType is generic since click 8.2; subscripted, it would not load with an older click.
class _Timestamp(click.ParamType):  # type: ignore[type-arg]
    """Epoch milliseconds, or an ISO 8601 date-time (UTC unless it names a zone)."""

    name = "timestamp"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{text!r} is neither epoch milliseconds nor an ISO 8601 date-time", param, ctx
            )
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)


@click.command("validate", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--source", help="Source bootstrap servers [KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS]."
)
@click.option(
    "--destination",
    help="Destination bootstrap servers [KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS].",
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    help="A source topic to check (repeatable). Default: every topic the flow replicates.",
)
@click.option(
    "--include", help="Source topics to check, regular expressions [REPLICATION_TOPICS_INCLUDE]."
)
@click.option("--exclude", help="Source topics not to check [REPLICATION_TOPICS_EXCLUDE].")
@click.option(
    "--match",
    type=click.Choice(["auto", "provenance", "content"]),
    default="auto",
    show_default=True,
    help="Pair records by the exactly.origin header, by content and position, or (auto) by the "
    "header when the first record of every destination partition of a topic carries it (with "
    "--two-way: always the header).",
)
@click.option(
    "--since",
    type=_Timestamp(),
    help="Check only records from this timestamp on (epoch milliseconds, or ISO 8601 such as "
    "2026-11-21T00:00:00Z), on both sides. Default: the earliest offset.",
)
@click.option(
    "--until",
    type=_Timestamp(),
    help="Check only records before this timestamp. Default: the end offsets when the run starts.",
)
@click.option(
    "--require-complete",
    is_flag=True,
    help="Records still in flight (not yet replicated) make the result a discrepancy; use it "
    "once traffic has stopped.",
)
@click.option(
    "--two-way",
    is_flag=True,
    help="The destination topics also receive records produced on the destination cluster "
    "itself (active-active: a flow each way between two clusters). Destination records "
    "without the exactly.origin header then count as local instead of unexpected. Whatever "
    "this option, source records that carry the header are copies made by another flow (here "
    "the reverse one), which stage 1 never copies again: they count as looped, and a copy of "
    "one fails the audit (loop_copied). Needs the provenance header, which loop prevention "
    "relies on: pairs by it, and exits 2 with --match content. Audit a pair once per "
    "direction, each with that flow's environment (its clusters, properties and topic names).",
)
@click.option(
    "--report",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("validation-report.json"),
    show_default=True,
    help="Where the JSON report goes.",
)
@click.option(
    "--chart",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("validation-report.html"),
    show_default=True,
    help="Where the chart (one self-contained HTML file) goes.",
)
@click.option(
    "--master",
    help="Spark master URL (default: spark-submit's, else local[*]).",
)
@click.option(
    "--plan",
    type=click.Choice(["auto", "join"]),
    default="auto",
    show_default=True,
    help="auto: merge each partition pair in offset order, one Spark task each (about one read "
    "of both topics), and check only the topics where the merge meets anything but a clean "
    "copy with the join plan; join: the join plan for every topic (several reads' worth of "
    "shuffles and sorts). The report is the same.",
)
@click.option(
    "--examples",
    type=click.IntRange(0, 1000),
    default=5,
    show_default=True,
    help="Examples per kind of finding, each the first of its kind in a partition.",
)
def validate(
    source: str | None,
    destination: str | None,
    topics: tuple[str, ...],
    include: str | None,
    exclude: str | None,
    match: str,
    since: int | None,
    until: int | None,
    require_complete: bool,
    two_way: bool,
    report: Path,
    chart: Path,
    master: str | None,
    plan: str,
    examples: int,
) -> None:
    """Prove exactly-once, record by record: the destination against the source, on Spark."""
    sys.exit(
        _run(
            _environment(
                os.environ,
                {
                    "source": source,
                    "destination": destination,
                    "include": include,
                    "exclude": exclude,
                },
                topics,
            ),
            topics,
            match,
            (since, until),
            require_complete,
            two_way,
            report,
            chart,
            master,
            plan,
            examples,
        )
    )


def main() -> None:
    validate(prog_name="exactly validate")


def _environment(
    environ: Mapping[str, str], flags: Mapping[str, str | None], topics: tuple[str, ...]
) -> dict[str, str]:
    env = dict(environ)
    for flag, variable in _OVERRIDES.items():
        if (value := flags[flag]) is not None:
            env[variable] = value
    # --topic alone names the topics: let the settings pick exactly those.
    if topics and not env.get(_OVERRIDES["include"]) and "KAFKA_CLUSTERS_SOURCE_TOPIC" not in env:
        env[_OVERRIDES["include"]] = ",".join(re.escape(topic) for topic in topics)
    return env


def _run(
    env: dict[str, str],
    topics: tuple[str, ...],
    match: str,
    times: tuple[int | None, int | None],
    require_complete: bool,
    two_way: bool,
    report_path: Path,
    chart_path: Path,
    master: str | None,
    plan: str,
    examples: int,
) -> int:
    settings = _settings(env)
    if settings is None or not _writable(report_path, chart_path):
        return EXIT_BAD_INPUT
    try:
        from validator.audit import AuditOptions, run_audit
    except ModuleNotFoundError as exc:
        return _without_pyspark(exc)
    from validator.merge import java_message
    from validator.progress import Progress
    from validator.snapshot import TimeRange

    options = AuditOptions(
        topics=topics,
        match=match,
        times=TimeRange(*times),
        require_complete=require_complete,
        two_way=two_way,
        master=master,
        examples=examples,
        plan=plan,
    )
    progress = Progress()
    # SIGTERM unwinds like Ctrl-C, through run_audit's spark.stop(): a driver that dies without
    # it leaves Spark's JVM behind, busy on the audit.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with progress.running():
            result = run_audit(settings, options, progress)
    except KeyboardInterrupt:
        print("exactly validate: interrupted, no verdict", file=sys.stderr)
        return EXIT_INCOMPLETE
    except ValidatorError as exc:
        print(f"exactly validate: {exc}", file=sys.stderr)
        return exc.exit_status
    except Exception as exc:
        if not _is_spark_error(exc):
            raise
        print(f"exactly validate: the audit could not finish: {java_message(exc)}", file=sys.stderr)
        return EXIT_INCOMPLETE
    if (unwritten := _write_outputs(result, report_path, chart_path)) is not None:
        return unwritten
    status: int = result["exit_status"]
    return status


def _without_pyspark(exc: ModuleNotFoundError) -> int:
    """Bad input, and one line that says how to install Spark, when this install left it out;
    any other module missing is raised (called while `exc` is handled)."""
    # The roles' install leaves Spark out (the `validator` extra brings it).
    if (exc.name or "").partition(".")[0] != "pyspark":
        raise exc
    print(
        "exactly validate: needs pyspark, which this install leaves out: "
        "pip install 'kafka-exactly[validator]' (or run the exactly-validator image)",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def _settings(env: dict[str, str]) -> Settings | None:
    """The settings, logging configured by them; None (and one line says why) when they are
    not valid."""
    from runtime.errors import ConfigError
    from runtime.logs import configure_logging
    from runtime.settings import load_settings

    try:
        settings = load_settings(env)
    except ConfigError as exc:
        print(f"exactly validate: configuration error: {exc}", file=sys.stderr)
        return None
    configure_logging(settings.log_level, "validator", json=settings.log_format == "json")
    return settings


def _writable(*paths: Path) -> bool:
    """Whether the report and the chart can be written, asked before the audit: a path found
    unwritable only after it would cost the verdict (and exit 1 would read as a discrepancy)."""
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            with path.open("ab"):
                pass
            if not existed:
                path.unlink()  # no file that could be taken for a report
        except OSError as exc:
            print(f"exactly validate: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            return False
    return True


def _write_outputs(result: dict[str, Any], report_path: Path, chart_path: Path) -> int | None:
    """The summary on standard output, then the chart and the report as JSON; the exit status
    if either could not be written, with the verdict already shown (and, when only the chart
    failed, in the report too, with that status)."""
    from rich.console import Console

    from validator.chart import write_chart
    from validator.render import render_table
    from validator.report import write_json

    # Off a terminal (CI logs, a pod) rich assumes 80 columns and squeezes the table unreadable.
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=240)
    render_table(result, console)
    # The chart first: a JSON report must carry the status the process exits with, and a chart
    # that cannot be written turns it into EXIT_INCOMPLETE.
    unwritten: int | None = None
    try:
        write_chart(result, chart_path)
    except OSError as exc:
        print(f"exactly validate: the chart was not written: {exc}", file=sys.stderr)
        result = {**result, "exit_status": EXIT_INCOMPLETE, "chart_not_written": str(exc)}
        unwritten = EXIT_INCOMPLETE
    try:
        write_json(result, report_path)
    except OSError as exc:
        print(f"exactly validate: the report was not written: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    if unwritten is None:
        print(f"report: {report_path}  chart: {chart_path}")
    return unwritten


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _is_spark_error(exc: Exception) -> bool:
    module = type(exc).__module__
    return module.startswith(("pyspark", "py4j"))
