"""The column expressions and frame steps both ways of pairing share (validator/compare.py):
findings as ``(kind, detail)`` structs, a field's mismatch, an unpaired source record's kind, and
pairing each record at most once."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from validator.kinds import DESTINATION_RECORD, IN_FLIGHT, MATCHED

FIELDS = {"key": "kh", "value": "vh", "headers": "hh", "timestamp": "ts"}
# What a full outer join of the two sides keeps of each: coordinates and field hashes.
PAIRED_COLUMNS = (
    *(f"s.s_{c}" for c in ("offset", "kh", "vh", "hh", "ts", "looped")),
    *(f"d.{c}" for c in ("d_partition", "d_offset", "kh", "vh", "hh", "ts")),
)
EVENT_COLUMNS = ("topic", "partition", "s_offset", "d_partition", "d_offset", "kind", "detail")


def finding(kind: str, detail: Column | None = None) -> Column:
    return F.struct(
        F.lit(kind).alias("kind"),
        (detail if detail is not None else F.lit(None).cast("string")).alias("detail"),
    )


def field_findings() -> list[Column]:
    findings = [
        F.when(F.col(f"s_{column}") != F.col(column), finding(f"{field}_mismatch"))
        for field, column in FIELDS.items()
        if field != "timestamp"
    ]
    findings.append(
        F.when(
            F.col("s_ts") != F.col("ts"),
            finding(
                "timestamp_mismatch",
                F.concat(F.lit("source "), F.col("s_ts"), F.lit(" ms, destination "), F.col("ts")),
            ),
        )
    )
    return findings


def unpaired_source(reach_max: str, reach_min: str) -> Column:
    """A source record without a copy: in flight beyond the furthest copied record, cut by the
    destination's retention before the first one, missing anywhere else (and always missing
    in a partition the destination lacks)."""
    return (
        # Nothing can be on its way to a partition the destination topic does not have.
        F.when(
            F.col("d_log_start").isNull(),
            finding("missing", F.lit("the destination topic has no such partition")),
        )
        .when(
            F.col(reach_max).isNull() | (F.col("s_offset") > F.col(reach_max)),
            finding(IN_FLIGHT),
        )
        .when(
            (F.col("s_offset") < F.col(reach_min)) & (F.col("d_log_start") > 0),
            finding("destination_retention"),
        )
        .otherwise(finding("missing"))
    )


def copied_loop() -> Column:
    return F.lit("the source record carries exactly.origin: a copy, copied again (a loop)")


def no_such_origin() -> Column:
    return F.concat(
        F.lit("exactly.origin names source partition "),
        F.col("partition"),
        F.lit(" offset "),
        F.col("origin_offset"),
        F.lit(", which is not a committed record there"),
    )


def or_matched(findings: Column) -> Column:
    shown = present(findings)
    return F.when(F.size(shown) == 0, F.array(finding(MATCHED))).otherwise(shown)


def present(findings: Column) -> Column:
    return F.filter(findings, lambda f: f.isNotNull())


def by_destination_partition(events: DataFrame) -> DataFrame:
    """A destination record is counted in its destination partition, not its source's."""
    return events.withColumn(
        "partition",
        F.when(F.col("kind") == DESTINATION_RECORD, F.col("d_partition")).otherwise(
            F.col("partition")
        ),
    )


def all_equal(pairs: Iterable[tuple[Column, Column]]) -> Column:
    condition: Column | None = None
    for left, right in pairs:
        condition = left == right if condition is None else condition & (left == right)
    if condition is None:
        raise ValueError("no columns to compare")  # callers always name at least one
    return condition


def pair_once(pairs: DataFrame) -> DataFrame:
    # Each record in at most one pair, so identical records do not count twice.
    return pairs.dropDuplicates(["topic", "partition", "s_offset"]).dropDuplicates(
        ["topic", "d_partition", "d_offset"]
    )


def without(
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


def union_all(frames: list[DataFrame]) -> DataFrame:
    events = frames[0]
    for frame in frames[1:]:
        events = events.unionByName(frame)
    return events
