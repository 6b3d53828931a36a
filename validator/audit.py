"""One audit, start to verdict: snapshot the ranges, merge each partition pair in offset order
(validator/merge.py), check what the merge did not prove with the join plan
(validator/compare.py), and bring back only counts and a few examples.

Two plans, one report. The merge reads both sides once, a Spark task per partition pair, and
proves a topic clean; it costs about a plain read. The join plan finds the fate of every record
with joins and windows, several reads' worth of shuffles and sorts, and names every kind of
finding; it gets each topic the merge did not prove (and every topic with ``--plan join``, or
where the merge's jar is missing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from runtime.logs import get_logger
from runtime.settings import DESTINATION_PREFIX, SOURCE_PREFIX, Settings
from validator.compare import find_events
from validator.errors import InputError, MergeJarError
from validator.flow_start import flow_started_at_ms
from validator.java_client import java_options
from validator.kinds import CONTENT, MATCHED, PROVENANCE, RECORD_COUNTS, SOURCE_RECORD
from validator.merge import Merged, java_message, merge_all, merge_unusable
from validator.merge_jar import jar_named_in, merge_jar
from validator.progress import Progress
from validator.read import DESTINATION, SOURCE, read_both_sides
from validator.report import build_report, example_rows
from validator.sample import first_records_with_origin
from validator.session import spark_session
from validator.snapshot import Snapshot, TimeRange, take_snapshot, with_current_log_starts

AUTO = "auto"
JOIN = "join"  # --plan join: the join plan for every topic
_log = get_logger("validator")


@dataclass(frozen=True)
class AuditOptions:
    topics: Sequence[str] = ()
    match: str = AUTO  # AUTO, PROVENANCE or CONTENT
    times: TimeRange = field(default_factory=TimeRange)
    require_complete: bool = False
    # Active-active: the destination topics also take records produced on their own cluster.
    two_way: bool = False
    master: str | None = None
    examples: int = 5
    plan: str = AUTO  # AUTO (merge, then join for what it did not prove) or JOIN


def run_audit(settings: Settings, options: AuditOptions, progress: Progress) -> dict[str, Any]:
    """The report of one audit; InputError before Spark starts when the input is wrong."""
    started = datetime.now(UTC)
    # Before anything starts: a security setting the Java client cannot be given is bad input.
    source_options = java_options(settings.source.client_config(), SOURCE_PREFIX)
    destination_options = java_options(settings.destination.client_config(), DESTINATION_PREFIX)
    options = _from_flow_start(settings, options, progress)
    progress.phase("taking the snapshot of both clusters' offsets")
    snapshot = take_snapshot(settings, options.topics, options.times)
    # Before Spark starts: the modes can refuse a two-way audit.
    modes = _modes(settings, snapshot, options, progress)
    progress.phase("starting Spark")
    # The data's own parallelism is its partition count; Spark's default of 200 shuffle
    # partitions costs more in task overhead than it brings for all but the largest audits.
    shuffle_partitions = min(200, max(2, snapshot.partition_count))
    spark = spark_session(
        options.master,
        {"spark.sql.shuffle.partitions": str(shuffle_partitions)},
        settings.spark_jars,
        _merge_jars(settings, options),
    )
    progress.watch(spark.sparkContext)
    try:
        return _audit(
            spark,
            settings,
            snapshot,
            modes,
            options,
            progress,
            started,
            (source_options, destination_options),
        )
    finally:
        spark.stop()


def _from_flow_start(settings: Settings, options: AuditOptions, progress: Progress) -> AuditOptions:
    """A flow that starts from ``latest`` left the source's history out on purpose: audited
    from its start (flow_start.py) unless --since says where."""
    if settings.start_from != "latest" or options.times.since is not None:
        return options
    started = flow_started_at_ms(settings)
    if started is None:
        return options
    at = datetime.fromtimestamp(started / 1000, UTC).isoformat(timespec="milliseconds")
    progress.phase(f"REPLICATION_START_FROM=latest: auditing from the flow's start, {at}")
    return replace(options, times=TimeRange(started, options.times.until))


def _audit(
    spark: SparkSession,
    settings: Settings,
    snapshot: Snapshot,
    modes: dict[str, str],
    options: AuditOptions,
    progress: Progress,
    started: datetime,
    cluster_options: tuple[dict[str, str], dict[str, str]],
) -> dict[str, Any]:
    merged = _merged(spark, snapshot, modes, options, progress, cluster_options)
    rest = tuple(pair for pair in snapshot.pairs if pair.source_topic not in merged.proven)
    records, findings, examples = dict(merged.records), dict(merged.findings), merged.examples
    if rest:
        joined = _joined(
            spark, replace(snapshot, pairs=rest), modes, options, progress, cluster_options
        )
        records |= joined[0]
        findings |= joined[1]
        examples = [*examples, *joined[2]]
    progress.phase("writing the report")
    moved, cut = _log_starts_moved(snapshot, settings)
    plans = {topic: "merge" for topic in merged.proven} | {
        pair.source_topic: "join" for pair in rest
    }
    return build_report(
        snapshot,
        modes=modes,
        plans=plans,
        records=records,
        findings=findings,
        examples=example_rows(
            sorted(examples, key=lambda row: (row["topic"], row["partition"], row["kind"])),
            snapshot,
            per_kind=options.examples,
        ),
        started=started,
        finished=datetime.now(UTC),
        master=str(spark.sparkContext.master),
        require_complete=options.require_complete,
        times=options.times,
        log_starts_moved=moved,
        retention_cut=cut,
        two_way=options.two_way,
    )


def _merged(
    spark: SparkSession,
    snapshot: Snapshot,
    modes: dict[str, str],
    options: AuditOptions,
    progress: Progress,
    cluster_options: tuple[dict[str, str], dict[str, str]],
) -> Merged:
    """The merge plan (validator/merge.py) over every pair where it can run; where it cannot or
    fails, nothing merged (a warning says why), so the join plan checks every topic."""
    total = sum(r.size for pair in snapshot.pairs for r in pair.source.values())
    merged = Merged()
    unusable = merge_unusable(spark) if options.plan == AUTO else None
    if options.plan == AUTO and unusable is None:
        progress.phase(
            f"merging {snapshot.partition_count} partition pairs of {len(snapshot.pairs)} "
            f"topic(s) in offset order, up to {total:,} source offsets, one Spark task each ("
            + ", ".join(f"{topic}: by {mode}" for topic, mode in modes.items())
            + ")"
        )
        try:
            merged = merge_all(
                spark,
                snapshot,
                modes,
                two_way=options.two_way,
                source=cluster_options[0],
                destination=cluster_options[1],
            )
        except Py4JError as exc:
            # The join plan may still give a verdict (a bug of the merge's must not cost one);
            # where the clusters are the cause, it fails too and says so.
            _log.warning(
                "the merge failed: every topic is checked by the join plan",
                reason=java_message(exc),
            )
    elif options.plan == AUTO:
        _log.warning(
            f"{unusable}: every topic is checked by the join plan, which costs several reads "
            "of both topics (under spark-submit, pass --jars with the path `python -m "
            "validator.merge_jar` prints)"
        )
    return merged


def _joined(
    spark: SparkSession,
    snapshot: Snapshot,
    modes: dict[str, str],
    options: AuditOptions,
    progress: Progress,
    cluster_options: tuple[dict[str, str], dict[str, str]],
) -> tuple[dict[tuple[str, str, int], int], dict[tuple[str, int, str], int], list[dict[str, Any]]]:
    """The join plan (validator/compare.py) over ``snapshot``'s pairs: the records read on each
    side, the count of each finding, and the first finding of each kind in each partition."""
    total = sum(r.size for pair in snapshot.pairs for r in pair.source.values())
    progress.phase(
        f"reading and comparing {len(snapshot.pairs)} topic(s), {snapshot.partition_count} "
        f"partitions, up to {total:,} source offsets, record by record with joins ("
        + ", ".join(
            f"{pair.source_topic}: by {modes[pair.source_topic]}" for pair in snapshot.pairs
        )
        + ")"
    )
    both = read_both_sides(spark, snapshot, *cluster_options)
    events = find_events(
        spark,
        both,
        snapshot,
        {pair.source_topic: modes[pair.source_topic] for pair in snapshot.pairs},
        two_way=options.two_way,
        all_later_read=options.times.until is None,
    )
    # One pass over both topics: the counts, and the first finding of each kind in each
    # partition as the examples. Only the destination is cached (compare.py): caching both sides
    # cost as much as reading them (2 x 1 M records of 100 B: 8.3 s against 4.3 s here).
    example = F.when(
        ~F.col("kind").isin(MATCHED, *RECORD_COUNTS),
        F.struct("s_offset", "d_partition", "d_offset", "detail"),
    )
    # Two aggregations in one job: the first groups by the example too, so that its buffer is a
    # count and Spark hashes it (a min over a struct would sort every event, three per record);
    # the bulk (matched records, record counts) has no example and collapses to one row a
    # partition and kind. The second, over those few rows, takes the first example.
    rows = (
        events.groupBy("topic", "partition", "kind", example.alias("example"))
        .count()
        .groupBy("topic", "partition", "kind")
        .agg(F.sum("count").alias("count"), F.min("example").alias("first"))
        .collect()
    )
    return _tally(rows)


def _tally(
    rows: list[Row],
) -> tuple[dict[tuple[str, str, int], int], dict[tuple[str, int, str], int], list[dict[str, Any]]]:
    """The join plan's aggregated rows as the records read on each side, the count of each
    finding, and the first finding of each kind in each partition."""
    records = {}
    findings = {}
    for row in rows:
        if row["kind"] in RECORD_COUNTS:
            side = SOURCE if row["kind"] == SOURCE_RECORD else DESTINATION
            records[(side, row["topic"], row["partition"])] = row["count"]
        else:
            findings[(row["topic"], row["partition"], row["kind"])] = row["count"]
    examples = [
        {
            "topic": row["topic"],
            "partition": row["partition"],
            "kind": row["kind"],
            **row["first"].asDict(),
        }
        for row in rows
        if row["first"] is not None
    ]
    return records, findings, examples


def _merge_jars(settings: Settings, options: AuditOptions) -> list[str]:
    """The merge plan's jar for spark.jars (built on the first run); none with --plan join, or
    where it cannot be built (the join plan then checks everything, and a warning says why)."""
    if options.plan != AUTO or jar_named_in(settings.spark_jars):
        return []  # the image's jar comes with the connector's, in spark.jars
    try:
        return [str(merge_jar(settings.spark_jars))]
    except MergeJarError as exc:
        _log.warning(
            "the merge plan's jar cannot be built; a jar on the classpath (the validator image's, "
            "or spark-submit --jars) still serves",
            reason=str(exc),
        )
        return []


def _log_starts_moved(
    snapshot: Snapshot, settings: Settings
) -> tuple[list[str], set[tuple[str, int]]]:
    """Partitions whose retention deleted records while the audit read them: worded, and as
    (source topic, partition).

    Spark reads with failOnDataLoss=false, so those records are simply absent: their copies
    can show as unexpected and they as missing. Named in the report and logged, never hidden;
    such a partition's findings give no verdict (validator/report.py).
    """
    now = with_current_log_starts(snapshot, settings)
    moved = []
    cut: set[tuple[str, int]] = set()
    for before, after in zip(snapshot.pairs, now.pairs, strict=True):
        for side, old, new, topic in (
            ("source", before.source, after.source, before.source_topic),
            ("destination", before.destination, after.destination, before.destination_topic),
        ):
            for p, r in old.items():
                if new[p].log_start > r.start:
                    moved.append(f"{side} {topic}[{p}] log start {r.start} -> {new[p].log_start}")
                    cut.add((before.source_topic, p))
    if moved:
        _log.warning(
            "retention deleted records while the audit read them; findings below the new log "
            "start may be retention's, not losses: check again with --since",
            partitions="; ".join(moved),
        )
    return moved, cut


def _modes(
    settings: Settings, snapshot: Snapshot, options: AuditOptions, progress: Progress
) -> dict[str, str]:
    """Each source topic's match mode; InputError for a two-way audit by content."""
    if options.two_way:
        if options.match == CONTENT:
            # Stage 1 tells a copy from a local record by the header alone; without it, content
            # pairing could not tell a local record from an invented one either.
            raise InputError(
                "a two-way audit needs the provenance header (loop prevention relies on it), "
                "but --match content pairs by content"
            )
        # The first records of an active-active destination partition are often its own
        # producers' (local), so sampling them says nothing about the header: pair by it.
        return {pair.source_topic: PROVENANCE for pair in snapshot.pairs}
    if options.match != AUTO:
        return {pair.source_topic: options.match for pair in snapshot.pairs}
    return _detected_modes(settings, snapshot, progress)


def _detected_modes(settings: Settings, snapshot: Snapshot, progress: Progress) -> dict[str, str]:
    # Only auto needs to look: a mode given on the command line reads nothing here.
    progress.phase("looking for the provenance header in the destination's first records")
    sampled = first_records_with_origin(settings, snapshot)
    modes = {}
    for pair in snapshot.pairs:
        looked, with_origin = sampled[pair.source_topic]
        if with_origin == looked:
            modes[pair.source_topic] = PROVENANCE
            continue
        if with_origin:
            # The header was turned on or off while the topic flowed: content pairs both kinds.
            _log.warning(
                "the first records of some destination partitions carry exactly.origin and of "
                "others do not: matching this topic by content",
                topic=pair.destination_topic,
                partitions_with_header=with_origin,
                partitions=looked,
            )
        modes[pair.source_topic] = CONTENT
    return modes


def _and_more(topics: Sequence[str]) -> str:
    return f" (and {len(topics) - 1} more)" if len(topics) > 1 else ""
