"""Both sides of the audit as one DataFrame of hashes, read with Spark's own Kafka source.

Each record becomes a row of fixed-size columns — its coordinates, one 64-bit hash per
field (key, value, headers, timestamp) and the provenance header's parts — computed on the
executors as the records stream in. Payloads never reach the driver, and the cached rows stay
small whatever the record size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from envelope.provenance import HEADER_PROVENANCE
from validator.snapshot import OffsetRange, Snapshot

SOURCE = "source"
DESTINATION = "destination"

_PROVENANCE_PATTERN = r"^(.+)/(\d+)/(\d+)$"


def read_both_sides(
    spark: SparkSession,
    snapshot: Snapshot,
    source: Mapping[str, str],
    destination: Mapping[str, str],
) -> DataFrame:
    """One DataFrame: ``side`` (source|destination), ``topic`` (the SOURCE topic name on both
    sides, so that rows of a pair meet), ``partition``, ``offset``, ``kh``, ``vh``, ``hh``,
    ``ts`` (milliseconds), ``h`` (all four), ``carries_origin`` (a provenance header with a
    value, well-formed or not: on the source, a copy that stage 1 does not copy again), and on
    the destination ``origin_cluster``, ``origin_partition``, ``origin_offset`` (null without a
    well-formed provenance header).

    ``source`` and ``destination`` are each cluster's ``kafka.`` options (java_client.py)."""
    source_ranges = {pair.source_topic: pair.source for pair in snapshot.pairs}
    destination_ranges = {pair.destination_topic: pair.destination for pair in snapshot.pairs}
    to_source_name = {pair.destination_topic: pair.source_topic for pair in snapshot.pairs}
    frames = []
    if _any_records(source_ranges):
        raw = _kafka(spark, source, source_ranges)
        frames.append(_hashed(raw, SOURCE, F.col("topic"), with_origin=False))
    if _any_records(destination_ranges):
        raw = _kafka(spark, destination, destination_ranges)
        mapping = F.create_map(*[F.lit(x) for item in to_source_name.items() for x in item])
        frames.append(_hashed(raw, DESTINATION, mapping[F.col("topic")], with_origin=True))
    both = frames[0]  # take_snapshot refuses a range empty on both sides
    for frame in frames[1:]:
        both = both.unionByName(frame)
    return both


def _any_records(ranges: Mapping[str, Mapping[int, OffsetRange]]) -> bool:
    return any(r.size for partitions in ranges.values() for r in partitions.values())


def _kafka(
    spark: SparkSession,
    options: Mapping[str, str],
    ranges: Mapping[str, Mapping[int, OffsetRange]],
) -> DataFrame:
    # Only partitions with something in range: Spark rejects start == end for some versions, and
    # an empty partition has nothing to read anyway.
    wanted = {
        topic: {str(p): r for p, r in partitions.items() if r.size}
        for topic, partitions in ranges.items()
    }
    wanted = {topic: partitions for topic, partitions in wanted.items() if partitions}
    return (
        spark.read.format("kafka")
        .options(**options)
        .option("assign", json.dumps({t: [int(p) for p in ps] for t, ps in wanted.items()}))
        .option(
            "startingOffsets",
            json.dumps({t: {p: r.start for p, r in ps.items()} for t, ps in wanted.items()}),
        )
        .option(
            "endingOffsets",
            json.dumps({t: {p: r.end for p, r in ps.items()} for t, ps in wanted.items()}),
        )
        # Invariant 6: what a consumer of the destination sees; aborted data is not data.
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        # A read_committed fetch at a range's end that holds only a transaction marker waits
        # this long for data that is not coming; per partition, per side (docs/design.md §9).
        .option("kafka.fetch.max.wait.ms", "10")
        # Larger polls and fetches than the Java client's defaults (500 records, 1 MiB per
        # partition): the read of 2 x 1 M records of 100 B took 15 s instead of 19 here.
        .option("kafka.max.poll.records", "10000")
        .option("kafka.max.partition.fetch.bytes", str(8 * 1024 * 1024))
        .option("kafka.fetch.max.bytes", str(64 * 1024 * 1024))
        # Retention may cut a partition while it is read: those offsets are reported from the
        # ranges (outside the checked range), not a failed run.
        .option("failOnDataLoss", "false")
        .load()
    )


def is_tombstone(vh: Column) -> Column:
    """Whether a value hash (``vh``, _hashed) is a null value's: the hash of "null" alone."""
    return vh == F.xxhash64(F.lit(True), F.lit(None).cast("binary"))


def _hashed(raw: DataFrame, side: str, topic: Column, *, with_origin: bool) -> DataFrame:
    # The provenance header is the pipeline's addition, not part of the record it copies.
    headers = F.filter("headers", lambda h: h["key"] != HEADER_PROVENANCE)
    # isNull in the hash: a null key and an empty key are different records.
    kh = F.xxhash64(F.col("key").isNull(), F.col("key"))
    vh = F.xxhash64(F.col("value").isNull(), F.col("value"))
    # Each value's isNull too: Spark's hash skips a null, so [("h", null), ("v", null)] would
    # hash as [("h", "v")]; a codec that lost null header values would pass unseen.
    hh = F.xxhash64(
        F.transform(headers, lambda h: F.struct(h["key"], h["value"].isNull(), h["value"]))
    )
    ts = F.unix_millis(F.col("timestamp"))
    columns = [
        F.lit(side).alias("side"),
        topic.alias("topic"),
        F.col("partition"),
        F.col("offset"),
        kh.alias("kh"),
        vh.alias("vh"),
        hh.alias("hh"),
        ts.alias("ts"),
    ]
    origins = F.filter(
        "headers", lambda h: (h["key"] == HEADER_PROVENANCE) & h["value"].isNotNull()
    )
    # Spark gives a record without headers a null list, not an empty one.
    columns.append(F.coalesce(F.size(origins) > 0, F.lit(False)).alias("carries_origin"))
    # Stage 2 appends its header after the record's own: on a copy of a copy (a loop) the last
    # one names this flow's source record, the first an earlier hop's.
    origin = F.get(origins, F.size(origins) - 1)["value"]
    text = origin.cast("string") if with_origin else F.lit(None).cast("string")
    # envelope.provenance's `<cluster id>/<partition>/<offset>`; anything else counts as no header.
    well_formed = text.rlike(_PROVENANCE_PATTERN)
    columns += [
        F.when(well_formed, F.regexp_extract(text, _PROVENANCE_PATTERN, 1)).alias("origin_cluster"),
        F.when(well_formed, F.regexp_extract(text, _PROVENANCE_PATTERN, 2).try_cast("int")).alias(
            "origin_partition"
        ),
        F.when(well_formed, F.regexp_extract(text, _PROVENANCE_PATTERN, 3).try_cast("long")).alias(
            "origin_offset"
        ),
    ]
    frame = raw.select(*columns)
    return frame.withColumn("h", F.xxhash64("kh", "vh", "hh", "ts"))
