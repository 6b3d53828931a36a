"""Pairing by content (validator/compare.py), when the exactly.origin header is off: the n-th
record with a given content in a source partition pairs with the n-th with that content in the
same destination partition. What stays unpaired is then paired in steps, each on what the
previous ones left: a whole record in another partition, then one field changed (the other
three still pair the records); whatever is left is missing, in flight or invented.

A source record that carries exactly.origin (a copy itself, never copied again) pairs last among
records of its content, so that a copy pairs with the record that should have one; left without
a copy it is ``looped`` and takes no part in the later steps, paired it is ``loop_copied``."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from validator.findings import (
    EVENT_COLUMNS,
    FIELDS,
    PAIRED_COLUMNS,
    all_equal,
    by_destination_partition,
    copied_loop,
    finding,
    pair_once,
    union_all,
    unpaired_source,
    without,
)
from validator.kinds import DESTINATION_RECORD, LOOPED, MATCHED, SOURCE_RECORD


def by_content(
    source: DataFrame, destination: DataFrame, ranges: DataFrame, cluster_id: str
) -> DataFrame:
    del cluster_id  # content pairs records whatever cluster their header names
    joined = _joined(source, destination)
    has_s, has_d = F.col("s_offset").isNotNull(), F.col("d_offset").isNotNull()
    pairs = joined.filter(has_s & has_d)
    # How far the pairs reach in each source partition (in flight beyond, missing before).
    reach = pairs.groupBy("topic", "partition").agg(
        F.max("s_offset").alias("reach_max"),
        F.min("s_offset").alias("reach_min"),
        F.min("d_offset").alias("reach_d_min"),
    )
    looped = F.col("s_looped")
    found = [
        _matched(pairs.filter(~looped)),
        _loop_copied(pairs.filter(looped)),
        _duplicated(joined.filter(~has_s & has_d)),
        _looped(joined.filter(has_s & ~has_d & looped)),
    ]
    lone_source = (
        joined.filter(has_s & ~has_d & ~looped)
        .select("topic", "partition", "s_offset", "s_kh", "s_vh", "s_hh", "s_ts", F.col("content"))
        .localCheckpoint()
    )
    lone_destination = (
        joined.filter(~has_s & has_d & (F.col("s_count") == 0))
        .select("topic", "d_partition", "d_offset", "kh", "vh", "hh", "ts", F.col("content"))
        .localCheckpoint()
    )
    # Each later step pairs a lone source record with a lone destination record, at two Spark
    # jobs a step: with either side empty (any clean audit) none can pair anything.
    if not (lone_source.isEmpty() or lone_destination.isEmpty()):
        moved = _moved(lone_source, lone_destination)
        found.append(
            moved.select(
                *EVENT_COLUMNS[:5],
                F.lit("wrong_partition").alias("kind"),
                F.concat(F.lit("in destination partition "), F.col("d_partition")).alias("detail"),
            )
        )
        lone_source, lone_destination = without(lone_source, lone_destination, moved)
        for field in FIELDS:
            changed = _changed(field, lone_source, lone_destination)
            found.append(_field_mismatch(field, changed))
            lone_source, lone_destination = without(lone_source, lone_destination, changed)
    found.append(_placed(lone_source, ranges, reach))
    found.append(_invented(lone_destination, ranges, reach))
    for counted, kind in ((has_s, SOURCE_RECORD), (has_d, DESTINATION_RECORD)):
        found.append(
            joined.filter(counted).select(
                *EVENT_COLUMNS[:5],
                F.lit(kind).alias("kind"),
                F.lit(None).cast("string").alias("detail"),
            )
        )
    return by_destination_partition(union_all(found))


def _joined(source: DataFrame, destination: DataFrame) -> DataFrame:
    """Both sides, the n-th occurrence of a content in a partition beside the n-th of the other
    side; with how often the source has that content and its last offset."""
    # Records that carry exactly.origin last: a copy pairs with one that should have a copy.
    same_source_content = Window.partitionBy("topic", "partition", "s_h").orderBy(
        "s_looped", "s_offset"
    )
    source = source.withColumn("n", F.row_number().over(same_source_content))
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
        *PAIRED_COLUMNS,
    )
    same_content = Window.partitionBy("topic", "partition", "content")
    return (
        joined.withColumn("s_count", F.count("s_offset").over(same_content))
        .withColumn("s_original", F.max("s_offset").over(same_content))
        .persist()
    )


def _matched(pairs: DataFrame) -> DataFrame:
    in_source_order = Window.partitionBy("topic", "partition").orderBy("s_offset")
    pairs = pairs.withColumn("prev_d_offset", F.lag("d_offset").over(in_source_order))
    return pairs.select(
        *EVENT_COLUMNS[:5],
        F.when(
            F.col("d_offset") < F.col("prev_d_offset"),
            finding(
                "out_of_order",
                F.concat(
                    F.lit("at destination offset "),
                    F.col("d_offset"),
                    F.lit(", before the copy of the source record preceding it"),
                ),
            ),
        )
        .otherwise(finding(MATCHED))
        .alias("finding"),
    ).select(*EVENT_COLUMNS[:5], "finding.kind", "finding.detail")


def _loop_copied(pairs: DataFrame) -> DataFrame:
    return pairs.select(
        *EVENT_COLUMNS[:5], F.lit("loop_copied").alias("kind"), copied_loop().alias("detail")
    )


def _looped(lone_source: DataFrame) -> DataFrame:
    return lone_source.select(
        *EVENT_COLUMNS[:3],
        F.lit(None).cast("int").alias("d_partition"),
        F.lit(None).cast("long").alias("d_offset"),
        F.lit(LOOPED).alias("kind"),
        F.lit(None).cast("string").alias("detail"),
    )


def _duplicated(unpaired_destination: DataFrame) -> DataFrame:
    """A destination record whose content the source has, once more than the source has it."""
    return unpaired_destination.filter(F.col("s_count") > 0).select(
        *EVENT_COLUMNS[:2],
        F.col("s_original").alias("s_offset"),
        "d_partition",
        "d_offset",
        F.lit("duplicated").alias("kind"),
        F.concat(F.lit("same content as source offset "), F.col("s_original")).alias("detail"),
    )


def _moved(lone_source: DataFrame, lone_destination: DataFrame) -> DataFrame:
    """A whole record in another partition of the same topic."""
    return pair_once(
        lone_source.alias("s")
        .join(
            lone_destination.alias("d"),
            (F.col("s.topic") == F.col("d.topic"))
            & (F.col("s.content") == F.col("d.content"))
            & (F.col("s.partition") != F.col("d.d_partition")),
        )
        .select("s.topic", "s.partition", "s.s_offset", "d.d_partition", "d.d_offset")
    )


def _changed(field: str, lone_source: DataFrame, lone_destination: DataFrame) -> DataFrame:
    """Pairs whose ``field`` alone differs: the other three fields still pair them."""
    others = [c for name, c in FIELDS.items() if name != field]
    return pair_once(
        lone_source.alias("s")
        .join(
            lone_destination.alias("d"),
            (F.col("s.topic") == F.col("d.topic"))
            & (F.col("s.partition") == F.col("d.d_partition"))
            & all_equal((F.col(f"s.s_{c}"), F.col(f"d.{c}")) for c in others),
        )
        .select(
            "s.topic", "s.partition", "s.s_offset", "d.d_partition", "d.d_offset", "s.s_ts", "d.ts"
        )
    )


def _field_mismatch(field: str, changed: DataFrame) -> DataFrame:
    detail: Column = (
        F.concat(F.lit("source "), F.col("s_ts"), F.lit(" ms, destination "), F.col("ts"))
        if field == "timestamp"
        else F.lit(None).cast("string")
    )
    return changed.select(
        *EVENT_COLUMNS[:5], F.lit(f"{field}_mismatch").alias("kind"), detail.alias("detail")
    )


def _placed(lone_source: DataFrame, ranges: DataFrame, reach: DataFrame) -> DataFrame:
    """Source records without a copy: in flight, cut by retention, or missing."""
    placed = (
        lone_source.join(ranges, ["topic", "partition"], "left")
        .join(F.broadcast(reach), ["topic", "partition"], "left")
        .select(
            *EVENT_COLUMNS[:3],
            F.lit(None).cast("int").alias("d_partition"),
            F.lit(None).cast("long").alias("d_offset"),
            unpaired_source("reach_max", "reach_min").alias("finding"),
        )
    )
    return placed.select(*EVENT_COLUMNS[:5], "finding.kind", "finding.detail")


def _invented(lone_destination: DataFrame, ranges: DataFrame, reach: DataFrame) -> DataFrame:
    """Destination records without a source record: cut from the source by retention, or
    unexpected."""
    invented = (
        lone_destination.withColumn("partition", F.col("d_partition"))
        .join(ranges, ["topic", "partition"], "left")
        .join(F.broadcast(reach), ["topic", "partition"], "left")
        .select(
            *EVENT_COLUMNS[:2],
            F.lit(None).cast("long").alias("s_offset"),
            "d_partition",
            "d_offset",
            # Before the first paired record, on a source whose retention has cut its log: the
            # source's copy is gone, not never written.
            F.when(
                (F.col("s_log_start") > 0)
                & (F.col("reach_d_min").isNull() | (F.col("d_offset") < F.col("reach_d_min"))),
                finding("source_retention"),
            )
            .otherwise(finding("unexpected", F.lit("no source record with this content")))
            .alias("finding"),
        )
    )
    return invented.select(*EVENT_COLUMNS[:5], "finding.kind", "finding.detail")
