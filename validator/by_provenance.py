"""Pairing by provenance (validator/compare.py): the exactly.origin header names the source
partition and offset of each copy, so a pair is exact and identical records are told apart.

A destination record without the header is ``unexpected``, or with ``two_way`` (the destination
topic also takes records produced on its own cluster) ``local``; one whose header names another
cluster is that flow's (``other_origin``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from validator.findings import (
    EVENT_COLUMNS,
    PAIRED_COLUMNS,
    by_destination_partition,
    copied_loop,
    field_findings,
    finding,
    no_such_origin,
    or_matched,
    present,
    unpaired_source,
)
from validator.kinds import DESTINATION_RECORD, LOCAL, LOOPED, SOURCE_RECORD
from validator.read import is_tombstone


def by_provenance(
    source: DataFrame,
    destination: DataFrame,
    ranges: DataFrame,
    cluster_id: str,
    *,
    two_way: bool = False,
    source_compacted: Sequence[str] = (),
) -> DataFrame:
    """``source_compacted``: the topics whose source is compacted and whose later records were
    all read (no --until), where a copy of a record the source no longer holds is ``compacted``
    if a later record of its key (on either side) could have replaced it, or it is a tombstone
    (the cleaner removes those after delete.retention.ms), and ``unexpected`` otherwise. In
    any other compacted topic such a copy is ``compacted``, as nothing can say otherwise."""
    ours = F.col("origin_offset").isNotNull() & (F.col("origin_cluster") == F.lit(cluster_id))
    foreign = _foreign(destination.filter(~ours), two_way)
    # The order is checked among this flow's copies only: a local record (active-active) or
    # another flow's copy between two of them says nothing about their order.
    copies = _numbered_copies(_with_previous_origin(destination.filter(ours)))
    joined = _with_replaced(_paired(source, copies, ranges), source, copies, source_compacted)
    has_s, has_d = F.col("s_offset").isNotNull(), F.col("d_offset").isNotNull()
    first = F.coalesce(F.col("copy"), F.lit(1)) == 1
    counted = F.array(
        F.when(has_s & first, finding(SOURCE_RECORD)), F.when(has_d, finding(DESTINATION_RECORD))
    )
    findings = _findings(has_s, has_d, first)
    found = joined.select(
        "topic",
        "partition",
        "s_offset",
        "d_partition",
        "d_offset",
        F.explode(F.concat(or_matched(findings), present(counted))).alias("finding"),
    ).select(*EVENT_COLUMNS[:5], "finding.kind", "finding.detail")
    foreign_counted = foreign.withColumn("kind", F.lit(DESTINATION_RECORD)).withColumn(
        "detail", F.lit(None).cast("string")
    )
    return by_destination_partition(found.unionByName(foreign).unionByName(foreign_counted))


def _with_previous_origin(destination: DataFrame) -> DataFrame:
    # Order as a consumer of the destination partition reads it.
    in_partition = Window.partitionBy("topic", "d_partition").orderBy("d_offset")
    return destination.withColumn(
        "prev_origin_partition", F.lag("origin_partition").over(in_partition)
    ).withColumn("prev_origin_offset", F.lag("origin_offset").over(in_partition))


def _foreign(records: DataFrame, two_way: bool) -> DataFrame:
    """Destination records without our header, or with another cluster's."""
    # Produced on the destination cluster itself: expected only in an active-active pair.
    headerless = (
        finding(LOCAL) if two_way else finding("unexpected", F.lit("no exactly.origin header"))
    )
    found = (
        F.when(F.col("origin_offset").isNotNull(), finding("other_origin", _from_cluster()))
        .when(
            F.col("carries_origin"),
            finding("unexpected", F.lit("exactly.origin not of the form <cluster>/<p>/<offset>")),
        )
        .otherwise(headerless)
    )
    return records.select(
        "topic",
        F.col("d_partition").alias("partition"),
        F.lit(None).cast("long").alias("s_offset"),
        "d_partition",
        "d_offset",
        found.alias("finding"),
    ).select(*EVENT_COLUMNS[:5], "finding.kind", "finding.detail")


def _from_cluster() -> Column:
    return F.concat(F.lit("from cluster "), F.col("origin_cluster"))


def _numbered_copies(ours: DataFrame) -> DataFrame:
    # The copy in its own partition, else the earliest, is "the" copy; any other is a duplicate.
    # Numbered before the join, partitioned by the join's own key, so that the join reuses this
    # shuffle instead of adding one over both sides' rows.
    copies = Window.partitionBy("topic", "origin_partition", "origin_offset").orderBy(
        (F.col("d_partition") != F.col("origin_partition")).asc(), "d_offset"
    )
    return (
        ours.withColumn("copy", F.row_number().over(copies))
        .withColumn("first_d_partition", F.first("d_partition").over(copies))
        .withColumn("first_d_offset", F.first("d_offset").over(copies))
    )


def _reach(copies: DataFrame, ranges: DataFrame) -> DataFrame:
    # How far replication has reached in each source partition: a source record beyond the
    # furthest one copied is still in flight, one before it is missing.
    return (
        copies.join(
            ranges.withColumnRenamed("partition", "origin_partition"),
            ["topic", "origin_partition"],
        )
        .filter(F.col("origin_offset").between(F.col("s_start"), F.col("s_end") - 1))
        .groupBy("topic", F.col("origin_partition").alias("partition"))
        .agg(F.max("origin_offset").alias("reach_max"), F.min("origin_offset").alias("reach_min"))
    )


def _with_replaced(
    joined: DataFrame, source: DataFrame, copies: DataFrame, compacted: Sequence[str]
) -> DataFrame:
    """Beside each row, ``replaced``: whether a log cleaner could have removed the source record
    its copy names (by_provenance's ``source_compacted``); no extra join when no topic asks."""
    if not compacted:
        return joined.withColumn("replaced", F.lit(True))
    topics = list(compacted)
    records = source.filter(F.col("topic").isin(topics)).select(
        "topic", "partition", F.col("s_kh").alias("kh"), F.col("s_offset").alias("at")
    )
    named = copies.filter(F.col("topic").isin(topics)).select(
        "topic",
        F.col("origin_partition").alias("partition"),
        "kh",
        F.col("origin_offset").alias("at"),
    )
    last = (
        records.unionByName(named)
        .groupBy("topic", "partition", "kh")
        .agg(F.max("at").alias("key_last"))
    )
    later = F.coalesce(F.col("key_last") > F.col("origin_offset"), F.lit(False))
    return joined.join(last, ["topic", "partition", "kh"], "left").withColumn(
        "replaced", ~F.col("topic").isin(topics) | later | is_tombstone(F.col("vh"))
    )


def _not_replaced() -> Column:
    return F.concat(
        no_such_origin(),
        F.lit("; the source is compacted, but no later record of this key could have replaced it"),
    )


def _paired(source: DataFrame, copies: DataFrame, ranges: DataFrame) -> DataFrame:
    """Each source record beside its copies (or alone), with its partition's range and reach."""
    s, d = source.alias("s"), copies.alias("d")
    joined = s.join(
        d,
        (F.col("s.topic") == F.col("d.topic"))
        & (F.col("s.partition") == F.col("d.origin_partition"))
        & (F.col("s.s_offset") == F.col("d.origin_offset")),
        "full_outer",
    ).select(
        F.coalesce("s.topic", "d.topic").alias("topic"),
        F.coalesce("s.partition", "d.origin_partition").alias("partition"),
        *PAIRED_COLUMNS,
        "d.origin_offset",
        "d.prev_origin_partition",
        "d.prev_origin_offset",
        "d.copy",
        "d.first_d_partition",
        "d.first_d_offset",
    )
    return joined.join(ranges, ["topic", "partition"], "left").join(
        F.broadcast(_reach(copies, ranges)), ["topic", "partition"], "left"
    )


def _findings(has_s: Column, has_d: Column, first: Column) -> Column:
    """What is wrong with a pair, as an array of findings (nulls where a check passed)."""
    looped = F.col("s_looped")
    return (
        # Every copy of a copy, the first one too: stage 1 must never have taken its source.
        F.when(has_s & has_d & looped, F.array(finding("loop_copied", copied_loop())))
        .when(
            has_s & has_d & ~first,
            F.array(
                finding(
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
                *field_findings(),
                F.when(
                    F.col("d_partition") != F.col("partition"),
                    finding(
                        "wrong_partition",
                        F.concat(F.lit("in destination partition "), F.col("d_partition")),
                    ),
                ),
                F.when(
                    (F.col("prev_origin_partition") == F.col("partition"))
                    & (F.col("origin_offset") < F.col("prev_origin_offset")),
                    finding(
                        "out_of_order",
                        F.concat(F.lit("follows source offset "), F.col("prev_origin_offset")),
                    ),
                ),
            ),
        )
        .when(has_s & looped, F.array(finding(LOOPED)))
        .when(has_s, F.array(unpaired_source("reach_max", "reach_min")))
        .otherwise(
            F.array(
                F.when(F.col("s_start").isNull(), finding("unexpected", no_such_origin()))
                .when(F.col("origin_offset") < F.col("s_log_start"), finding("source_retention"))
                .when(F.col("origin_offset") < F.col("s_start"), finding("before_range"))
                .when(F.col("origin_offset") >= F.col("s_end"), finding("after_range"))
                .when(F.col("compacted") & F.col("replaced"), finding("compacted"))
                .when(F.col("compacted"), finding("unexpected", _not_replaced()))
                .otherwise(finding("unexpected", no_such_origin()))
            )
        )
    )
