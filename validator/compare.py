"""Matching the destination against the source, as Spark plans that run on the executors.

The result is one row per finding: ``topic`` (the source topic), ``partition``, ``s_offset``,
``d_partition``, ``d_offset``, ``kind`` and ``detail``. A record that arrived exactly once,
unchanged and in order is one ``matched`` row; everything else is named by a kind below.

Two ways to pair a destination record with its source record:

- **provenance** (the exactly.origin header, DESIGN.md §3): the header names the source
  partition and offset, so the pair is exact, and identical records are still told apart.
- **content** (the header is off): the n-th record with a given content (key, value, headers,
  timestamp) in a source partition pairs with the n-th record with that content in the same
  destination partition — matching by position among equal records. A changed field leaves
  both records unpaired; they are then paired by their three unchanged fields, so a change is
  reported as a change at both offsets, not as one record lost and another invented, and a
  shifted tail (after a duplicate or a loss) does not turn every later record into a mismatch.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from validator.kinds import (
    CONTENT,
    DESTINATION_RECORD,
    IN_FLIGHT,
    MATCHED,
    PROVENANCE,
    SOURCE_RECORD,
)
from validator.read import DESTINATION, SOURCE
from validator.snapshot import Snapshot

_FIELDS = {"key": "kh", "value": "vh", "headers": "hh", "timestamp": "ts"}
# What a full outer join of the two sides keeps of each: coordinates and field hashes.
_PAIRED_COLUMNS = (
    *(f"s.s_{c}" for c in ("offset", "kh", "vh", "hh", "ts")),
    *(f"d.{c}" for c in ("d_partition", "d_offset", "kh", "vh", "hh", "ts")),
)
_EVENT_COLUMNS = ("topic", "partition", "s_offset", "d_partition", "d_offset", "kind", "detail")


def find_events(
    spark: SparkSession, both: DataFrame, snapshot: Snapshot, modes: dict[str, str]
) -> DataFrame:
    """The findings of every pair; ``modes`` maps each source topic to PROVENANCE or CONTENT."""
    ranges = _ranges_frame(spark, snapshot)
    source = both.filter(F.col("side") == SOURCE).select(
        "topic",
        "partition",
        F.col("offset").alias("s_offset"),
        *[F.col(c).alias(f"s_{c}") for c in ("kh", "vh", "hh", "ts", "h")],
    )
    destination = both.filter(F.col("side") == DESTINATION).select(
        "topic",
        F.col("partition").alias("d_partition"),
        F.col("offset").alias("d_offset"),
        "kh",
        "vh",
        "hh",
        "ts",
        "h",
        "origin_cluster",
        "origin_partition",
        "origin_offset",
    )
    # Several branches of the plan read the destination (pairs, how far replication reached,
    # records without our header): cached, Kafka is read once. The source feeds one branch.
    destination = destination.persist(StorageLevel.MEMORY_AND_DISK)
    frames = []
    for mode, finder in ((PROVENANCE, _by_provenance), (CONTENT, _by_content)):
        topics = [topic for topic, m in modes.items() if m == mode]
        if topics:
            frames.append(
                finder(
                    source.filter(F.col("topic").isin(topics)),
                    destination.filter(F.col("topic").isin(topics)),
                    ranges,
                    snapshot.source.cluster_id,
                )
            )
    events = frames[0]
    for frame in frames[1:]:
        events = events.unionByName(frame)
    return events


def _ranges_frame(spark: SparkSession, snapshot: Snapshot) -> DataFrame:
    """One row per partition pair: the ranges and how the source topic is cleaned up.

    Built from literals in the JVM (not spark.createDataFrame of Python rows, which would start
    Python workers on every executor for a table of a few hundred rows).
    """
    columns = (
        ("topic", "string"),
        ("partition", "int"),
        ("s_start", "long"),
        ("s_end", "long"),
        ("s_log_start", "long"),
        ("d_log_start", "long"),
        ("compacted", "boolean"),
    )
    rows = []
    for pair in snapshot.pairs:
        for p in pair.partitions:
            s, d = pair.source.get(p), pair.destination.get(p)
            values = (
                pair.source_topic,
                p,
                s.start if s else None,
                s.end if s else None,
                s.log_start if s else None,
                d.log_start if d else None,
                pair.source_compacted,
            )
            rows.append(
                F.struct(
                    *[
                        F.lit(value).cast(kind).alias(name)
                        for value, (name, kind) in zip(values, columns, strict=True)
                    ]
                )
            )
    return F.broadcast(spark.range(1).select(F.inline(F.array(*rows))))


def _by_provenance(
    source: DataFrame, destination: DataFrame, ranges: DataFrame, cluster_id: str
) -> DataFrame:
    # Order as a consumer of the destination partition reads it.
    in_partition = Window.partitionBy("topic", "d_partition").orderBy("d_offset")
    destination = destination.withColumn(
        "prev_origin_partition", F.lag("origin_partition").over(in_partition)
    ).withColumn("prev_origin_offset", F.lag("origin_offset").over(in_partition))
    ours = F.col("origin_offset").isNotNull() & (F.col("origin_cluster") == F.lit(cluster_id))
    foreign = destination.filter(~ours).select(
        "topic",
        F.col("d_partition").alias("partition"),
        F.lit(None).cast("long").alias("s_offset"),
        "d_partition",
        "d_offset",
        F.when(F.col("origin_offset").isNull(), F.lit("unexpected"))
        .otherwise(F.lit("other_origin"))
        .alias("kind"),
        F.when(F.col("origin_offset").isNull(), F.lit("no exactly.origin header"))
        .otherwise(F.concat(F.lit("from cluster "), F.col("origin_cluster")))
        .alias("detail"),
    )
    # The copy in its own partition, else the earliest, is "the" copy; any other is a duplicate.
    # Numbered before the join, partitioned by the join's own key, so that the join reuses this
    # shuffle instead of adding one over both sides' rows.
    copies = Window.partitionBy("topic", "origin_partition", "origin_offset").orderBy(
        (F.col("d_partition") != F.col("origin_partition")).asc(), "d_offset"
    )
    ours_only = (
        destination.filter(ours)
        .withColumn("copy", F.row_number().over(copies))
        .withColumn("first_d_partition", F.first("d_partition").over(copies))
        .withColumn("first_d_offset", F.first("d_offset").over(copies))
    )
    # How far replication has reached in each source partition: a source record beyond the
    # furthest one copied is still in flight, one before it is missing.
    reach = (
        ours_only.join(
            ranges.withColumnRenamed("partition", "origin_partition"),
            ["topic", "origin_partition"],
        )
        .filter(F.col("origin_offset").between(F.col("s_start"), F.col("s_end") - 1))
        .groupBy("topic", F.col("origin_partition").alias("partition"))
        .agg(F.max("origin_offset").alias("reach_max"), F.min("origin_offset").alias("reach_min"))
    )
    s, d = source.alias("s"), ours_only.alias("d")
    joined = s.join(
        d,
        (F.col("s.topic") == F.col("d.topic"))
        & (F.col("s.partition") == F.col("d.origin_partition"))
        & (F.col("s.s_offset") == F.col("d.origin_offset")),
        "full_outer",
    ).select(
        F.coalesce("s.topic", "d.topic").alias("topic"),
        F.coalesce("s.partition", "d.origin_partition").alias("partition"),
        *_PAIRED_COLUMNS,
        "d.origin_offset",
        "d.prev_origin_partition",
        "d.prev_origin_offset",
        "d.copy",
        "d.first_d_partition",
        "d.first_d_offset",
    )
    joined = joined.join(ranges, ["topic", "partition"], "left").join(
        F.broadcast(reach), ["topic", "partition"], "left"
    )
    has_s, has_d = F.col("s_offset").isNotNull(), F.col("d_offset").isNotNull()
    first = F.coalesce(F.col("copy"), F.lit(1)) == 1
    findings = (
        F.when(
            has_s & has_d & ~first,
            F.array(
                _finding(
                    "duplicated",
                    F.concat(
                        F.lit("another copy at destination partition "),
                        F.col("first_d_partition"),
                        F.lit(" offset "),
                        F.col("first_d_offset"),
                    ),
                )
            ),
        )
        .when(
            has_s & has_d,
            F.array(
                *_field_findings(),
                F.when(
                    F.col("d_partition") != F.col("partition"),
                    _finding(
                        "wrong_partition",
                        F.concat(F.lit("in destination partition "), F.col("d_partition")),
                    ),
                ),
                F.when(
                    (F.col("prev_origin_partition") == F.col("partition"))
                    & (F.col("origin_offset") < F.col("prev_origin_offset")),
                    _finding(
                        "out_of_order",
                        F.concat(F.lit("follows source offset "), F.col("prev_origin_offset")),
                    ),
                ),
            ),
        )
        .when(has_s, F.array(_unpaired_source("reach_max", "reach_min")))
        .otherwise(
            F.array(
                F.when(F.col("s_start").isNull(), _finding("unexpected", _no_such_origin()))
                .when(F.col("origin_offset") < F.col("s_log_start"), _finding("source_retention"))
                .when(F.col("origin_offset") < F.col("s_start"), _finding("before_range"))
                .when(F.col("origin_offset") >= F.col("s_end"), _finding("after_range"))
                .when(F.col("compacted"), _finding("compacted"))
                .otherwise(_finding("unexpected", _no_such_origin()))
            )
        )
    )
    counted = F.array(
        F.when(has_s & first, _finding(SOURCE_RECORD)), F.when(has_d, _finding(DESTINATION_RECORD))
    )
    found = joined.select(
        "topic",
        "partition",
        "s_offset",
        "d_partition",
        "d_offset",
        F.explode(F.concat(_or_matched(findings), _present(counted))).alias("finding"),
    ).select(*_EVENT_COLUMNS[:5], "finding.kind", "finding.detail")
    foreign_counted = foreign.withColumn("kind", F.lit(DESTINATION_RECORD)).withColumn(
        "detail", F.lit(None).cast("string")
    )
    return _by_destination_partition(found.unionByName(foreign).unionByName(foreign_counted))


def _by_content(
    source: DataFrame, destination: DataFrame, ranges: DataFrame, cluster_id: str
) -> DataFrame:
    del cluster_id  # content pairs records whatever cluster their header names
    # The n-th occurrence of a content in a partition, on each side.
    source = source.withColumn(
        "n",
        F.row_number().over(Window.partitionBy("topic", "partition", "s_h").orderBy("s_offset")),
    )
    destination = destination.withColumn(
        "n",
        F.row_number().over(Window.partitionBy("topic", "d_partition", "h").orderBy("d_offset")),
    )
    s, d = source.alias("s"), destination.alias("d")
    joined = s.join(
        d,
        (F.col("s.topic") == F.col("d.topic"))
        & (F.col("s.partition") == F.col("d.d_partition"))
        & (F.col("s.s_h") == F.col("d.h"))
        & (F.col("s.n") == F.col("d.n")),
        "full_outer",
    ).select(
        F.coalesce("s.topic", "d.topic").alias("topic"),
        F.coalesce("s.partition", "d.d_partition").alias("partition"),
        F.coalesce("s.s_h", "d.h").alias("content"),
        *_PAIRED_COLUMNS,
    )
    same_content = Window.partitionBy("topic", "partition", "content")
    joined = (
        joined.withColumn("s_count", F.count("s_offset").over(same_content))
        .withColumn("s_original", F.max("s_offset").over(same_content))
        .persist()
    )
    has_s, has_d = F.col("s_offset").isNotNull(), F.col("d_offset").isNotNull()

    pairs = joined.filter(has_s & has_d)
    in_source_order = Window.partitionBy("topic", "partition").orderBy("s_offset")
    pairs = pairs.withColumn("prev_d_offset", F.lag("d_offset").over(in_source_order))
    matched = pairs.select(
        *_EVENT_COLUMNS[:5],
        F.when(
            F.col("d_offset") < F.col("prev_d_offset"),
            _finding(
                "out_of_order",
                F.concat(
                    F.lit("at destination offset "),
                    F.col("d_offset"),
                    F.lit(", before the copy of the source record preceding it"),
                ),
            ),
        )
        .otherwise(_finding(MATCHED))
        .alias("finding"),
    ).select(*_EVENT_COLUMNS[:5], "finding.kind", "finding.detail")
    # How far the pairs reach in each source partition (in flight beyond, missing before).
    reach = pairs.groupBy("topic", "partition").agg(
        F.max("s_offset").alias("reach_max"),
        F.min("s_offset").alias("reach_min"),
        F.min("d_offset").alias("reach_d_min"),
    )

    duplicated = joined.filter(~has_s & has_d & (F.col("s_count") > 0)).select(
        *_EVENT_COLUMNS[:2],
        F.col("s_original").alias("s_offset"),
        "d_partition",
        "d_offset",
        F.lit("duplicated").alias("kind"),
        F.concat(F.lit("same content as source offset "), F.col("s_original")).alias("detail"),
    )
    lone_source = (
        joined.filter(has_s & ~has_d)
        .select("topic", "partition", "s_offset", "s_kh", "s_vh", "s_hh", "s_ts", F.col("content"))
        .localCheckpoint()
    )
    lone_destination = (
        joined.filter(~has_s & has_d & (F.col("s_count") == 0))
        .select("topic", "d_partition", "d_offset", "kh", "vh", "hh", "ts", F.col("content"))
        .localCheckpoint()
    )
    found = [matched, duplicated]

    # A whole record in another partition of the same topic.
    moved = _pair_once(
        lone_source.alias("s")
        .join(
            lone_destination.alias("d"),
            (F.col("s.topic") == F.col("d.topic"))
            & (F.col("s.content") == F.col("d.content"))
            & (F.col("s.partition") != F.col("d.d_partition")),
        )
        .select("s.topic", "s.partition", "s.s_offset", "d.d_partition", "d.d_offset")
    )
    found.append(
        moved.select(
            *_EVENT_COLUMNS[:5],
            F.lit("wrong_partition").alias("kind"),
            F.concat(F.lit("in destination partition "), F.col("d_partition")).alias("detail"),
        )
    )
    lone_source, lone_destination = _without(lone_source, lone_destination, moved)

    # One field changed: the other three still pair the two records.
    for field, column in _FIELDS.items():
        others = [c for c in _FIELDS.values() if c != column]
        changed = _pair_once(
            lone_source.alias("s")
            .join(
                lone_destination.alias("d"),
                (F.col("s.topic") == F.col("d.topic"))
                & (F.col("s.partition") == F.col("d.d_partition"))
                & _all_equal((F.col(f"s.s_{c}"), F.col(f"d.{c}")) for c in others),
            )
            .select(
                "s.topic",
                "s.partition",
                "s.s_offset",
                "d.d_partition",
                "d.d_offset",
                "s.s_ts",
                "d.ts",
            )
        )
        detail = (
            F.concat(F.lit("source "), F.col("s_ts"), F.lit(" ms, destination "), F.col("ts"))
            if field == "timestamp"
            else F.lit(None).cast("string")
        )
        found.append(
            changed.select(
                *_EVENT_COLUMNS[:5],
                F.lit(f"{field}_mismatch").alias("kind"),
                detail.alias("detail"),
            )
        )
        lone_source, lone_destination = _without(lone_source, lone_destination, changed)

    placed = (
        lone_source.join(ranges, ["topic", "partition"], "left")
        .join(F.broadcast(reach), ["topic", "partition"], "left")
        .select(
            *_EVENT_COLUMNS[:3],
            F.lit(None).cast("int").alias("d_partition"),
            F.lit(None).cast("long").alias("d_offset"),
            _unpaired_source("reach_max", "reach_min").alias("finding"),
        )
    )
    found.append(placed.select(*_EVENT_COLUMNS[:5], "finding.kind", "finding.detail"))
    invented = (
        lone_destination.withColumn("partition", F.col("d_partition"))
        .join(ranges, ["topic", "partition"], "left")
        .join(F.broadcast(reach), ["topic", "partition"], "left")
        .select(
            *_EVENT_COLUMNS[:2],
            F.lit(None).cast("long").alias("s_offset"),
            "d_partition",
            "d_offset",
            # Before the first paired record, on a source whose retention has cut its log: the
            # source's copy is gone, not never written.
            F.when(
                (F.col("s_log_start") > 0)
                & (F.col("reach_d_min").isNull() | (F.col("d_offset") < F.col("reach_d_min"))),
                _finding("source_retention"),
            )
            .otherwise(_finding("unexpected", F.lit("no source record with this content")))
            .alias("finding"),
        )
    )
    found.append(invented.select(*_EVENT_COLUMNS[:5], "finding.kind", "finding.detail"))
    for counted, kind in ((has_s, SOURCE_RECORD), (has_d, DESTINATION_RECORD)):
        found.append(
            joined.filter(counted).select(
                *_EVENT_COLUMNS[:5],
                F.lit(kind).alias("kind"),
                F.lit(None).cast("string").alias("detail"),
            )
        )
    events = found[0]
    for frame in found[1:]:
        events = events.unionByName(frame)
    return _by_destination_partition(events)


def _finding(kind: str, detail: Column | None = None) -> Column:
    return F.struct(
        F.lit(kind).alias("kind"),
        (detail if detail is not None else F.lit(None).cast("string")).alias("detail"),
    )


def _field_findings() -> list[Column]:
    findings = [
        F.when(F.col(f"s_{column}") != F.col(column), _finding(f"{field}_mismatch"))
        for field, column in _FIELDS.items()
        if field != "timestamp"
    ]
    findings.append(
        F.when(
            F.col("s_ts") != F.col("ts"),
            _finding(
                "timestamp_mismatch",
                F.concat(F.lit("source "), F.col("s_ts"), F.lit(" ms, destination "), F.col("ts")),
            ),
        )
    )
    return findings


def _unpaired_source(reach_max: str, reach_min: str) -> Column:
    """A source record without a copy: in flight beyond the furthest copied record, cut by the
    destination's retention before the first one, missing anywhere else (and always missing
    in a partition the destination lacks)."""
    return (
        # Nothing can be on its way to a partition the destination topic does not have.
        F.when(
            F.col("d_log_start").isNull(),
            _finding("missing", F.lit("the destination topic has no such partition")),
        )
        .when(
            F.col(reach_max).isNull() | (F.col("s_offset") > F.col(reach_max)),
            _finding(IN_FLIGHT),
        )
        .when(
            (F.col("s_offset") < F.col(reach_min)) & (F.col("d_log_start") > 0),
            _finding("destination_retention"),
        )
        .otherwise(_finding("missing"))
    )


def _no_such_origin() -> Column:
    return F.concat(
        F.lit("exactly.origin names source partition "),
        F.col("partition"),
        F.lit(" offset "),
        F.col("origin_offset"),
        F.lit(", which is not a committed record there"),
    )


def _or_matched(findings: Column) -> Column:
    present = _present(findings)
    return F.when(F.size(present) == 0, F.array(_finding(MATCHED))).otherwise(present)


def _present(findings: Column) -> Column:
    return F.filter(findings, lambda f: f.isNotNull())


def _by_destination_partition(events: DataFrame) -> DataFrame:
    """A destination record is counted in its destination partition, not its source's."""
    return events.withColumn(
        "partition",
        F.when(F.col("kind") == DESTINATION_RECORD, F.col("d_partition")).otherwise(
            F.col("partition")
        ),
    )


def _all_equal(pairs: Iterable[tuple[Column, Column]]) -> Column:
    condition = None
    for left, right in pairs:
        condition = left == right if condition is None else condition & (left == right)
    return condition


def _pair_once(pairs: DataFrame) -> DataFrame:
    # Each record in at most one pair, so identical records do not count twice.
    return pairs.dropDuplicates(["topic", "partition", "s_offset"]).dropDuplicates(
        ["topic", "d_partition", "d_offset"]
    )


def _without(
    lone_source: DataFrame, lone_destination: DataFrame, paired: DataFrame
) -> tuple[DataFrame, DataFrame]:
    # Materialized (they are small: the unpaired records only) so that each pairing step plans
    # on the previous one's result; left lazy, every step would re-plan all the steps before it,
    # and the plan grows exponentially.
    return (
        lone_source.join(
            paired.select("topic", "partition", "s_offset"),
            on=["topic", "partition", "s_offset"],
            how="left_anti",
        ).localCheckpoint(),
        lone_destination.join(
            paired.select("topic", "d_partition", "d_offset"),
            on=["topic", "d_partition", "d_offset"],
            how="left_anti",
        ).localCheckpoint(),
    )
