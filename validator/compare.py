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

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from validator.by_content import by_content
from validator.by_provenance import by_provenance
from validator.findings import union_all
from validator.kinds import CONTENT, PROVENANCE
from validator.read import DESTINATION, SOURCE
from validator.snapshot import Snapshot


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
    for mode, finder in ((PROVENANCE, by_provenance), (CONTENT, by_content)):
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
    return union_all(frames)


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
