"""One audit, start to verdict: snapshot the ranges, read both sides once into Spark's cache,
find every record's fate on the executors, and bring back only counts and a few examples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Row, SparkSession, Window
from pyspark.sql import functions as F

from runtime.logs import get_logger
from runtime.settings import Settings
from validator.compare import find_events
from validator.kinds import CONTENT, MATCHED, PROVENANCE
from validator.progress import Progress
from validator.read import DESTINATION, read_both_sides
from validator.report import build_report, example_rows
from validator.session import spark_session
from validator.snapshot import Snapshot, TimeRange, take_snapshot

AUTO = "auto"
_log = get_logger("validator")


@dataclass(frozen=True)
class AuditOptions:
    topics: Sequence[str] = ()
    match: str = AUTO  # AUTO, PROVENANCE or CONTENT
    times: TimeRange = field(default_factory=TimeRange)
    require_complete: bool = False
    master: str | None = None
    examples: int = 5


def run_audit(settings: Settings, options: AuditOptions, progress: Progress) -> dict[str, Any]:
    """The report of one audit; InputError before Spark starts when the input is wrong."""
    started = datetime.now(UTC)
    progress.phase("taking the snapshot of both clusters' offsets")
    snapshot = take_snapshot(settings, options.topics, options.times)
    progress.phase("starting Spark")
    # The data's own parallelism is its partition count; Spark's default of 200 shuffle
    # partitions costs more in task overhead than it brings for all but the largest audits.
    shuffle_partitions = min(200, max(2, snapshot.partition_count))
    spark = spark_session(options.master, {"spark.sql.shuffle.partitions": str(shuffle_partitions)})
    progress.watch(spark.sparkContext)
    try:
        return _audit(spark, settings, snapshot, options, progress, started)
    finally:
        spark.stop()


def _audit(
    spark: SparkSession,
    settings: Settings,
    snapshot: Snapshot,
    options: AuditOptions,
    progress: Progress,
    started: datetime,
) -> dict[str, Any]:
    total = sum(r.size for pair in snapshot.pairs for r in pair.source.values())
    progress.phase(
        f"reading {len(snapshot.pairs)} topic(s), {snapshot.partition_count} partitions, "
        f"up to {total:,} source offsets"
    )
    both = read_both_sides(
        spark,
        snapshot,
        settings.source.client_config(),
        settings.destination.client_config(),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    per_partition = (
        both.groupBy("side", "topic", "partition")
        .agg(F.count("*").alias("records"), F.count("origin_offset").alias("with_origin"))
        .collect()
    )
    records = {(r["side"], r["topic"], r["partition"]): r["records"] for r in per_partition}
    modes = _modes(snapshot, per_partition, options.match)
    progress.phase(
        "comparing record by record ("
        + ", ".join(f"{topic}: {mode}" for topic, mode in modes.items())
        + ")"
    )
    events = find_events(spark, both, snapshot, modes).persist(StorageLevel.MEMORY_AND_DISK)
    counts = events.groupBy("topic", "partition", "kind").count().collect()
    findings = {(r["topic"], r["partition"], r["kind"]): r["count"] for r in counts}
    progress.phase("collecting examples")
    first = Window.partitionBy("kind").orderBy("topic", "partition", "s_offset", "d_offset")
    rows = (
        events.filter(F.col("kind") != MATCHED)
        .withColumn("rank", F.row_number().over(first))
        .filter(F.col("rank") <= options.examples)
        .drop("rank")
        .collect()
    )
    progress.phase("writing the report")
    return build_report(
        snapshot,
        modes=modes,
        records=records,
        findings=findings,
        examples=example_rows((row.asDict() for row in rows), snapshot),
        started=started,
        finished=datetime.now(UTC),
        master=spark.sparkContext.master,
        require_complete=options.require_complete,
        times=options.times,
    )


def _modes(snapshot: Snapshot, per_partition: list[Row], match: str) -> dict[str, str]:
    if match != AUTO:
        return {pair.source_topic: match for pair in snapshot.pairs}
    modes = {}
    for pair in snapshot.pairs:
        rows = [
            r for r in per_partition if r["side"] == DESTINATION and r["topic"] == pair.source_topic
        ]
        records = sum(r["records"] for r in rows)
        with_origin = sum(r["with_origin"] for r in rows)
        if with_origin == records:
            modes[pair.source_topic] = PROVENANCE
        else:
            if with_origin:
                # The header was turned on or off while the topic flowed: content pairs both kinds.
                _log.warning(
                    "some destination records carry exactly.origin and some do not: matching "
                    "this topic by content",
                    topic=pair.destination_topic,
                    with_header=with_origin,
                    records=records,
                )
            modes[pair.source_topic] = CONTENT
    return modes
