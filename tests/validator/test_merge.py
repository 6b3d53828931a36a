"""The merge plan (issue 20) against the join plan, on real Kafka: where the merge proves a topic,
its report is the join plan's, count for count and example for example; where it meets a fault it
hands the topic to the join plan (test_validate.py: every planted fault is still reported).

One audit over two topics, run once with each plan (the join plan for every topic where the jar
on the classpath is not the build of these sources):
- ``P``, copied with the exactly.origin header: source records that are copies themselves
  (looped), another cluster's copies on the destination (other_origin), a copy naming an offset
  past the source's end (after_range), the source's retention cut under its copies
  (source_retention), the destination's retention cut before its first copy
  (destination_retention), and partitions copied only in part (in flight);
- ``C``, copied without the header: looped source records and a partial copy (in flight).
"""

from __future__ import annotations

import re
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from envelope import HEADER_PROVENANCE, encode_provenance
from runtime.cache import CACHE_DIR_VARIABLE
from tests.kafka_helpers import ReadRecord, create_topic, read_all
from tests.validator.planting import PARTITIONS, create_source
from tests.validator.running import run_validate
from validator.merge_jar import DIGEST_RESOURCE, merge_jar

pytestmark = pytest.mark.timeout(600)

OTHER_CLUSTER = "other-cluster-id"
LOOPED_PER_PARTITION = 3


def _topic(label: str) -> str:
    return f"merge.{label}.{uuid.uuid4().hex[:8]}"


def _with_looped(bootstrap: str, topic: str) -> list[ReadRecord]:
    """create_source's topic, then in each partition a few records that are copies from another
    cluster (a reverse flow's), which stage 1 never copies: looped."""
    create_source(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(PARTITIONS):
        for n in range(LOOPED_PER_PARTITION):
            origin = encode_provenance(OTHER_CLUSTER, partition, 100 + n)
            producer.produce(
                topic,
                partition=partition,
                key=b"looped-%d" % n,
                value=b"from the other cluster %d" % n,
                headers=[(HEADER_PROVENANCE, origin)],
            )
    assert producer.flush(30) == 0
    return read_all(bootstrap, topic, PARTITIONS)


def _copies(records: list[ReadRecord], cluster_id: str | None) -> dict[int, list[tuple]]:
    """Each partition's copy as stage 2 writes it: the records that are not copies, in order."""
    lanes: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        if any(name == HEADER_PROVENANCE for name, _ in r.headers):
            continue
        headers = list(r.headers)
        if cluster_id is not None:
            headers.append(
                (HEADER_PROVENANCE, encode_provenance(cluster_id, r.partition, r.offset))
            )
        lanes[r.partition].append((r.key, r.value, headers, r.timestamp[1], r.offset))
    return lanes


def _write(bootstrap: str, topic: str, lanes: dict[int, list[tuple]]) -> None:
    create_topic(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, lane in lanes.items():
        for key, value, headers, timestamp, _offset in lane:
            producer.produce(
                topic,
                partition=partition,
                key=key,
                value=value,
                headers=headers,
                timestamp=timestamp,
            )
    assert producer.flush(30) == 0


def _delete_below(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    tp = TopicPartition(topic, partition, offset)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer comes
    admin.delete_records([tp])[tp].result(30)


def _with_provenance(source_cluster, target_cluster) -> tuple[str, str]:
    source = _topic("p")
    destination = f"{source}.copy"
    records = _with_looped(source_cluster.bootstrap_servers, source)
    lanes = _copies(records, source_cluster.cluster_id)
    lanes[1] = lanes[1][:20]  # in flight: the rest not copied yet
    now = int(time.time() * 1000)
    origin = encode_provenance(OTHER_CLUSTER, 3, 7)
    lanes[3][10:10] = [(b"k", b"another flow's", [(HEADER_PROVENANCE, origin)], now, None)] * 2
    past_end = encode_provenance(source_cluster.cluster_id, 4, 10_000)
    lanes[4].append((b"k", b"v", [(HEADER_PROVENANCE, past_end)], now, None))
    _write(target_cluster.bootstrap_servers, destination, lanes)
    # The source's retention cut under three copies; the destination's before four records.
    _delete_below(source_cluster.bootstrap_servers, source, 5, 3)
    _delete_below(target_cluster.bootstrap_servers, destination, 6, 4)
    return source, destination


def _without_provenance(source_cluster, target_cluster) -> tuple[str, str]:
    source = _topic("c")
    destination = f"{source}.copy"
    records = _with_looped(source_cluster.bootstrap_servers, source)
    lanes = _copies(records, None)
    lanes[2] = lanes[2][:11]
    lanes[9] = []
    _write(target_cluster.bootstrap_servers, destination, lanes)
    return source, destination


@pytest.mark.slow
def test_the_merge_proves_clean_topics_with_the_join_plans_report(
    source_cluster, target_cluster, tmp_path
):
    pairs = [
        _with_provenance(source_cluster, target_cluster),
        _without_provenance(source_cluster, target_cluster),
    ]
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        # Each copy under its own name, as a user would set it.
        "REPLICATION_TOPICS_INCLUDE": ",".join(re.escape(source) for source, _ in pairs),
        "REPLICATION_DESTINATION_TOPIC": "{topic}.copy",
    }
    merged = run_validate(env, tmp_path / "merge")
    # The merge cannot be used: the jar on the classpath is another build (as a jar left from
    # an older kafka-exactly would be). The join plan checks every topic, with a warning.
    joined = run_validate(
        {**env, CACHE_DIR_VARIABLE: str(_cache_with_another_build(tmp_path / "cache"))},
        tmp_path / "join",
    )
    for result in (merged, joined):
        assert result.status == 0, result.stdout + result.stderr
    merge_report, join_report = merged.report, joined.report
    (provenance, _), (content, _) = pairs
    assert {t["source_topic"]: (t["match"], t["plan"]) for t in merge_report["topics"]} == {
        provenance: ("provenance", "merge"),
        content: ("content", "merge"),
    }
    assert {t["plan"] for t in join_report["topics"]} == {"join"}
    # The same report, but for when it ran and how.
    for key in ("partitions", "totals", "examples", "verdict", "log_starts_moved"):
        assert merge_report[key] == join_report[key], key
    totals = merge_report["totals"]
    looped = 2 * PARTITIONS * LOOPED_PER_PARTITION
    assert totals["looped"] == looped
    assert totals["in_flight"] == (30 - 20) + (30 - 11) + 30
    assert totals["matched"] == 2 * 360 - totals["in_flight"] - 3 - 4
    outside = {
        kind: sum(p["outside_range"][kind] for p in merge_report["partitions"])
        for kind in merge_report["partitions"][0]["outside_range"]
    }
    assert outside == {
        "source_retention": 3,
        "destination_retention": 4,
        "compacted": 0,
        "other_origin": 2,
        "before_range": 0,
        "after_range": 1,
    }
    assert "merging" in merged.stderr
    assert "merging" not in joined.stderr
    assert "the merge plan's jar on the classpath was built from other sources" in joined.stderr
    assert "every topic is checked by the join plan" in joined.stderr


def _cache_with_another_build(cache: Path) -> Path:
    """A cache whose merge jar, where this checkout's would be, is the same classes recording
    other sources' digest."""
    ours = merge_jar()
    other = cache / "validator" / ours.name
    other.parent.mkdir(parents=True)
    with zipfile.ZipFile(ours) as original, zipfile.ZipFile(other, "w") as copy:
        for entry in original.infolist():
            if entry.filename != DIGEST_RESOURCE:
                copy.writestr(entry, original.read(entry))
        copy.writestr(DIGEST_RESOURCE, "0" * 64)
    return cache
