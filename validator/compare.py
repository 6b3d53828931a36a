"""Matching the destination against the source, as Spark plans that run on the executors.

The result is one row per finding: ``topic`` (the source topic), ``partition``, ``s_offset``,
``d_partition``, ``d_offset``, ``kind`` and ``detail``. A record that arrived exactly once,
unchanged and in order is one ``matched`` row; everything else is named by a kind below.

Two ways to pair a destination record with its source record:

- **provenance** (the exactly.origin header, docs/design.md §3): the header names the source
  partition and offset, so the pair is exact, and identical records are still told apart.
- **content** (the header is off): the n-th record with a given content (key, value, headers,
  timestamp) in a source partition pairs with the n-th record with that content in the same
  destination partition — matching by position among equal records. A changed field leaves
  both records unpaired; they are then paired by their three unchanged fields, so a change is
  reported as a change at both offsets, not as one record lost and another invented, and a
  shifted tail (after a duplicate or a loss) does not turn every later record into a mismatch.

Either way a source record that carries the exactly.origin header is a copy itself, which stage 1
never copies again (active-active loop prevention): it is ``looped`` when it has no copy and
``loop_copied``, a discrepancy, when it has one.
"""

from __future__ import annotations

from functools import partial

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from validator.by_content import by_content
from validator.by_provenance import by_provenance
from validator.findings import EVENT_COLUMNS, union_all
from validator.kinds import CONTENT, MATCHED, PROVENANCE
from validator.read import DESTINATION, SOURCE
from validator.snapshot import Snapshot


def find_events(
    spark: SparkSession,
    both: DataFrame,
    snapshot: Snapshot,
    modes: dict[str, str],
    *,
    two_way: bool = False,
    all_later_read: bool = True,
) -> DataFrame:
    """The findings of every pair; ``modes`` maps each source topic to PROVENANCE or CONTENT.

    ``two_way``: destination records without the header were produced on the destination
    cluster (``local``), not invented; only the provenance plan can tell them apart.
    ``all_later_read``: the ranges reach the snapshot (no --until), so a compacted source's
    later records of a key are read (by_provenance's ``source_compacted``)."""
    ranges = _ranges_frame(spark, snapshot)
    source, destination = _sides(both)
    # Several branches of the plan read the destination (pairs, how far replication reached,
    # records without our header): cached, Kafka is read once. The source feeds one branch.
    destination = destination.persist(StorageLevel.MEMORY_AND_DISK)
    destination_compacted = [p.source_topic for p in snapshot.pairs if p.destination_compacted]
    source_compacted_by_content = [
        p.source_topic
        for p in snapshot.pairs
        if p.source_compacted and modes[p.source_topic] == CONTENT
    ]
    if destination_compacted:
        # Read again by _compaction: cached rather than read from Kafka twice.
        source = source.persist(StorageLevel.MEMORY_AND_DISK)
    frames = []
    # With --until, a later record of a key may lie past the range: not read, no evidence.
    source_compacted = (
        [p.source_topic for p in snapshot.pairs if p.source_compacted] if all_later_read else []
    )
    finders = (
        (PROVENANCE, partial(by_provenance, two_way=two_way, source_compacted=source_compacted)),
        (CONTENT, by_content),
    )
    for mode, finder in finders:
        topics = [topic for topic, m in modes.items() if m == mode]
        if mode == CONTENT and topics and two_way:
            raise ValueError("a two-way audit pairs by provenance only")  # run_audit refuses it
        if topics:
            frames.append(
                finder(
                    source.filter(F.col("topic").isin(topics)),
                    destination.filter(F.col("topic").isin(topics)),
                    ranges,
                    snapshot.source.cluster_id,
                )
            )
    return _compaction(
        union_all(frames),
        source,
        destination,
        destination_compacted=destination_compacted,
        source_compacted_by_content=source_compacted_by_content,
    )


def _sides(both: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The source's and the destination's records, each with the columns its plans read."""
    source = both.filter(F.col("side") == SOURCE).select(
        "topic",
        "partition",
        F.col("offset").alias("s_offset"),
        *[F.col(c).alias(f"s_{c}") for c in ("kh", "vh", "hh", "ts", "h")],
        F.col("carries_origin").alias("s_looped"),
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
        "carries_origin",
    )
    return source, destination


def _compaction(
    events: DataFrame,
    source: DataFrame,
    destination: DataFrame,
    *,
    destination_compacted: list[str],
    source_compacted_by_content: list[str],
) -> DataFrame:
    """What a log cleaner removed is ``compacted``, in both match modes, never a discrepancy:

    - a source record ``missing`` from a compacted destination topic whose key has a later
      record copied there: the destination's cleaner removed it (the later one replaced it);
    - by content, a destination record ``unexpected`` in a topic whose source is compacted, whose
      key has a later copied record: the source's cleaner removed its original. (By provenance
      the header names the offset the source no longer holds: by_provenance says so itself.)
      Without the header such a record cannot be told from an invented one with the same key.

    Only for those topics: the lookups read their records a second time (cached), and a
    compacted topic's records all have keys (Kafka refuses a keyless record in one)."""
    if not (destination_compacted or source_compacted_by_content):
        return events
    # Each step below reads the events three times (the matched, the judged, the rest):
    # computed once, not once for each (the joins and windows behind them are the audit's cost).
    events = events.persist(StorageLevel.MEMORY_AND_DISK)
    for topics, side, kind, offset, partition, key, cleaned in (
        (destination_compacted, source, "missing", "s_offset", "partition", "s_kh", "destination"),
        (
            source_compacted_by_content,
            destination,
            "unexpected",
            "d_offset",
            "d_partition",
            "kh",
            "source",
        ),
    ):
        if not topics:
            continue
        events = _compacted(events, topics, side, kind, offset, partition, key, cleaned)
    return events


def _compacted(
    events: DataFrame,
    topics: list[str],
    side: DataFrame,
    kind: str,
    offset: str,
    partition: str,
    key: str,
    cleaned: str,
) -> DataFrame:
    """``events`` with each ``kind`` finding in ``topics`` whose key has a later copied record
    on ``side`` as ``compacted``: the ``cleaned`` side's log cleaner removed it (_compaction)."""
    matched = F.col("kind") == MATCHED
    # The side whose later copied record of the key replaced the one the cleaner removed.
    side_name = {"destination": "source", "source": "destination"}
    in_scope = F.col("topic").isin(topics)
    keys = side.filter(in_scope).select("topic", partition, offset, key)
    latest = (
        events.filter(in_scope & matched)
        .select("topic", partition, offset)
        .join(keys, ["topic", partition, offset])
        .groupBy("topic", partition, key)
        .agg(F.max(offset).alias("latest_copied"))
    )
    judged = in_scope & (F.col("kind") == kind)
    replaced = F.col("latest_copied") > F.col(offset)
    reclassified = (
        events.filter(judged)
        .join(keys, ["topic", partition, offset], "left")
        .join(latest, ["topic", partition, key], "left")
        .select(
            *EVENT_COLUMNS[:5],
            F.when(replaced, F.lit("compacted")).otherwise(F.col("kind")).alias("kind"),
            F.when(
                replaced,
                F.concat(
                    F.lit(f"compacted away on the {cleaned}: {side_name[cleaned]} offset "),
                    F.col("latest_copied"),
                    F.lit(" of its key was copied"),
                ),
            )
            .otherwise(F.col("detail"))
            .alias("detail"),
        )
    )
    return events.filter(~judged).unionByName(reclassified)


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
