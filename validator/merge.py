"""The merge plan: both sides of a partition are ordered, so one Spark task per partition pair
reads the source range and the destination range side by side and compares each copy with the
record it must be (validator/java/: PartitionMerge, MergeJob). No shuffle, no sort, no cache:
the audit costs about one read of both topics.

The merge proves; it does not explain. A topic whose every partition is a clean copy (matched,
with what lies outside the copy by design: in flight, looped, local, another cluster's copies,
outside the range, retention) is counted here as the join plan (validator/compare.py) would
count it, example for example. A topic where any partition is anything else goes to the join
plan whole, which names every finding: the join plan's pairing crosses partitions (a copy in
the wrong one, a duplicate elsewhere), so it gets every partition of the topic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from runtime.logs import get_logger
from validator.kinds import RECORD_COUNTS, SOURCE_RECORD
from validator.merge_jar import MERGE_CLASS, sources_digest
from validator.read import DESTINATION, SOURCE
from validator.snapshot import OffsetRange, Snapshot

_log = get_logger("validator")


@dataclass
class Merged:
    """What the merge proved, in the shapes validator/report.py's build_report takes."""

    # Source topics the merge counted whole; every other one is for the join plan.
    proven: set[str] = field(default_factory=set)
    # Why each other topic is not proven: the first partition's reason.
    unproven: dict[str, str] = field(default_factory=dict)
    records: dict[tuple[str, str, int], int] = field(default_factory=dict)
    findings: dict[tuple[str, int, str], int] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)


def merge_unusable(spark: SparkSession) -> str | None:
    """Why the merge plan cannot run on this driver, or None when it can: its jar must be on
    the driver's classpath (spark.jars, or spark-submit --jars) and be the build of the sources
    installed here (a jar left from another version speaks another JSON)."""
    found = _jvm(spark)
    for part in MERGE_CLASS.split("."):
        found = getattr(found, part)
    if not isinstance(found, JavaClass):
        return "the merge plan's jar is not on the driver's classpath"
    try:
        built_from = str(found.sourcesDigest())
    except Py4JError:  # a jar older than the digest
        built_from = ""
    wanted = sources_digest()
    if built_from != wanted:
        return (
            f"the merge plan's jar on the classpath was built from other sources "
            f"({built_from[:16] or 'a build without a digest'}) than this kafka-exactly's "
            f"({wanted[:16]})"
        )
    return None


def merge_all(
    spark: SparkSession,
    snapshot: Snapshot,
    modes: Mapping[str, str],
    *,
    two_way: bool,
    source: Mapping[str, str],
    destination: Mapping[str, str],
) -> Merged:
    """Merge every partition pair of the snapshot; ``source`` and ``destination`` are each
    cluster's ``kafka.`` options (java_client.py)."""
    tasks = merge_tasks(snapshot, modes, two_way=two_way)
    job = _jvm(spark).io.kafkaexactly.validator.MergeJob
    answer = job.run(
        spark._jsparkSession,
        json.dumps(tasks),
        json.dumps(_client_properties(source)),
        json.dumps(_client_properties(destination)),
    )
    return collect(json.loads(answer))


def merge_tasks(
    snapshot: Snapshot, modes: Mapping[str, str], *, two_way: bool
) -> list[dict[str, Any]]:
    """One task per partition pair, the largest first: Spark starts tasks in order, and a
    large partition started last would leave the other cores idle at the end."""
    tasks = []
    for pair in snapshot.pairs:
        for p in pair.partitions:
            source, destination = pair.source.get(p), pair.destination.get(p)
            tasks.append(
                {
                    "topic": pair.source_topic,
                    "destinationTopic": pair.destination_topic,
                    "partition": p,
                    "mode": modes[pair.source_topic],
                    "clusterId": snapshot.source.cluster_id,
                    "twoWay": two_way,
                    "sourceCompacted": pair.source_compacted,
                    "source": _range(source),
                    "destination": _range(destination),
                }
            )
    return sorted(tasks, key=_size, reverse=True)


def collect(results: list[dict[str, Any]]) -> Merged:
    """The proven topics' counts and examples from the tasks' results."""
    merged = Merged()
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_topic.setdefault(result["topic"], []).append(result)
    for topic, partitions in sorted(by_topic.items()):
        unproven = sorted(
            (r for r in partitions if not r["proven"]), key=lambda r: int(r["partition"])
        )
        if unproven:
            first = unproven[0]
            merged.unproven[topic] = f"partition {first['partition']}: {first['reason']}"
            continue
        merged.proven.add(topic)
        for result in partitions:
            _count(merged, topic, int(result["partition"]), result)
    if merged.unproven:
        _log.info(
            "topics the merge did not prove, checked by the join plan",
            topics="; ".join(f"{t} ({why})" for t, why in merged.unproven.items()),
        )
    return merged


def _count(merged: Merged, topic: str, partition: int, result: dict[str, Any]) -> None:
    for kind, count in result["counts"].items():
        if kind in RECORD_COUNTS:
            side = SOURCE if kind == SOURCE_RECORD else DESTINATION
            merged.records[(side, topic, partition)] = int(count)
        else:
            merged.findings[(topic, partition, kind)] = int(count)
    for kind, (s_offset, d_partition, d_offset, detail) in result["firsts"].items():
        merged.examples.append(
            {
                "topic": topic,
                "partition": partition,
                "kind": kind,
                "s_offset": s_offset,
                "d_partition": d_partition,
                "d_offset": d_offset,
                "detail": detail,
            }
        )


def java_message(exc: Exception) -> str:
    """The first line of what the JVM said: a Spark job's failure names the task's exception
    there ("Job aborted due to stage failure: ... java.lang.IllegalStateException: ..."), where
    py4j's own first line only names the call."""
    java = getattr(exc, "java_exception", None)
    text = str(exc)
    if java is not None:
        try:
            text = str(java.getMessage() or java.toString())
        except Exception:  # the gateway gone with the JVM: py4j's own text is all there is
            text = str(exc)
    lines = text.strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _jvm(spark: SparkSession) -> Any:
    # py4j's view of the driver's JVM: classes are looked up by attribute, dynamically.
    return spark.sparkContext._jvm


def _client_properties(options: Mapping[str, str]) -> dict[str, str]:
    # Spark's Kafka source takes the Java client's properties prefixed; the merge's own
    # consumers take them as they are.
    return {name.removeprefix("kafka."): value for name, value in options.items()}


def _range(found: OffsetRange | None) -> dict[str, int] | None:
    if found is None:
        return None
    return {"start": found.start, "end": found.end, "logStart": found.log_start}


def _size(task: dict[str, Any]) -> int:
    return sum(r["end"] - r["start"] for r in (task["source"], task["destination"]) if r)
