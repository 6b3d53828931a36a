"""`exactly validate` on compacted topics, with Kafka's real log cleaner on both sides (issue 20):
what a cleaner removed is `compacted`, never `missing` or `unexpected`, in both match modes.

Two source topics, each copied by hand as stage 2 would write it (with the exactly.origin header,
and without it):
- `fast`: the source's cleaner runs and the destination's does not: the destination holds copies
  of records the source no longer has (the source compacted them after they were copied);
- `slow`: the destination's cleaner runs and the source's does not: the source still holds
  records whose later value of the same key replaced them on the destination.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from envelope import HEADER_PROVENANCE, encode_provenance
from tests.kafka_helpers import ReadRecord, create_topic, read_all
from tests.validator.running import run_validate

pytestmark = pytest.mark.timeout(600)

KEYS = 8
ROUNDS = 3
# The cleaner compacts a closed segment once its dirty share passes the ratio; a record of the
# next round after segment.ms closes the segment before it. A day of min.compaction.lag.ms keeps
# the other side's cleaner off.
CLEANED = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}
KEPT = {"min.compaction.lag.ms": str(24 * 3600 * 1000)}


def _compacted_topic(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact", **config})


def _produce_rounds(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for round_number in range(ROUNDS):
        for key in range(KEYS):
            producer.produce(topic, key=b"k%d" % key, value=b"r%d-k%d" % (round_number, key))
        assert producer.flush(30) == 0
        time.sleep(0.2)  # past segment.ms: the next round closes this round's segment


def _copy(bootstrap: str, topic: str, records: list[ReadRecord], cluster_id: str | None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in records:
        headers = list(record.headers)
        if cluster_id is not None:
            headers.append((HEADER_PROVENANCE, encode_provenance(cluster_id, 0, record.offset)))
        producer.produce(
            topic,
            key=record.key,
            value=record.value,
            headers=headers,
            partition=0,
            timestamp=record.timestamp[1],
        )
        time.sleep(0.2 / KEYS)  # several segments on the destination too
    assert producer.flush(30) == 0


def _clean(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in CLEANED.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _await_cleaned(bootstrap: str, topic: str, fewer_than: int) -> None:
    deadline = time.monotonic() + 90
    while len(read_all(bootstrap, topic, 1)) >= fewer_than:
        assert time.monotonic() < deadline, f"the log cleaner did not compact {topic}"
        time.sleep(0.5)


@pytest.mark.slow
def test_what_a_log_cleaner_removed_on_either_side_is_compacted_not_missing(
    source_cluster, target_cluster, tmp_path
):
    base = f"validate.compacted.{uuid.uuid4().hex[:8]}"
    source, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
    total = KEYS * ROUNDS
    # Each side's cleaner, each copied with the header (provenance) and without it (content):
    # one audit, `--match auto` telling the two apart by the header.
    cases = {
        f"{base}.{side}.{match}": (side, match)
        for side in ("fast", "slow")
        for match in ("provenance", "content")
    }
    for topic in cases:
        # Both sides start KEPT: nothing is cleaned before it is copied, as when replication
        # keeps up. The cleaning side gets CLEANED once the copies are there.
        _compacted_topic(source, topic, KEPT)
        _produce_rounds(source, topic)
        _compacted_topic(target, f"{topic}.copy", KEPT)
    origins = {
        topic: source_cluster.cluster_id if match == "provenance" else None
        for topic, (_side, match) in cases.items()
    }
    cleaned = {
        topic: (source, topic) if side == "fast" else (target, f"{topic}.copy")
        for topic, (side, _match) in cases.items()
    }
    for topic in cases:
        records = read_all(source, topic, 1)
        assert len(records) == total
        _copy(target, f"{topic}.copy", records, origins[topic])
        _clean(*cleaned[topic])
    # One record more, past the new segment.ms and copied like the others, closes the segment
    # that holds the rounds on both sides; then the cleaning side's cleaner, all four at once
    # (one cleaner pass after another would cost a cleaner backoff each).
    time.sleep(0.2)
    producer = Producer({"bootstrap.servers": source})
    for topic in cases:
        producer.produce(topic, key=b"roll", value=b"roll")
    assert producer.flush(30) == 0
    for topic in cases:
        roll = [r for r in read_all(source, topic, 1) if r.key == b"roll"]
        _copy(target, f"{topic}.copy", roll, origins[topic])
    for topic in cases:
        _await_cleaned(*cleaned[topic], fewer_than=total + 1)

    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
        "REPLICATION_TOPICS_INCLUDE": f"{base}\\..*",
        "REPLICATION_DESTINATION_TOPIC": "{topic}.copy",
    }
    # Every topic by the join plan, which judges what a cleaner removed in both match modes
    # (in auto, the merge proves only the provenance topic whose copies outlived the source's
    # cleaner and hands the rest to it).
    audit = run_validate(env, tmp_path / "audit", "--require-complete", "--plan", "join")
    assert audit.status == 0, audit.stdout + audit.stderr
    assert {t["plan"] for t in audit.report["topics"]} == {"join"}
    assert "merging" not in audit.stderr
    assert {t["source_topic"]: t["match"] for t in audit.report["topics"]} == {
        topic: match for topic, (_side, match) in cases.items()
    }
    rows = {p["source_topic"]: p for p in audit.report["partitions"]}
    for topic, (side, _match) in cases.items():
        row = rows[topic]
        # What the audit read: a cleaner pass after it may have removed more since.
        on_source, on_destination = row["source_records"], row["destination_records"]
        assert (row["missing"], row["unexpected"]) == (0, 0), row
        if side == "slow":
            assert on_source == total + 1  # KEPT: that cleaner left it alone
            # What the destination's cleaner removed, the source still holds: compacted.
            assert row["matched"] == on_destination
            assert row["outside_range"]["compacted"] == on_source - on_destination, row
        else:
            assert on_destination == total + 1
            # What the source's cleaner removed after the copy: compacted on that side.
            assert row["matched"] == on_source
            assert row["outside_range"]["compacted"] == on_destination - on_source, row


# The merge handing the topic to the join (auto) in the default suite; the join alone, and with
# --until, in make test-spark (by hand, outside CI): each is a Spark audit of about half a
# minute, and neither the default suite nor CI has room for them.
@pytest.mark.parametrize(
    ("plan", "until"),
    [
        pytest.param("join", False, marks=[pytest.mark.slow, pytest.mark.spark]),
        ("auto", False),
        pytest.param("join", True, marks=[pytest.mark.slow, pytest.mark.spark]),
    ],
)
def test_a_copy_of_an_offset_no_later_record_of_its_key_replaced_is_unexpected_not_compacted(
    source_cluster, target_cluster, tmp_path, plan, until
):
    """A compacted source whose cleaner never ran, and a copy naming the offset of an aborted
    record (a transactional source, as a Kafka Streams changelog is): nothing on either side
    could have replaced it, so the cleaner did not remove it. Its neighbour, whose key has a
    later record, is compacted, and so is a tombstone's copy (a cleaner removes tombstones after
    delete.retention.ms, replaced or not). With --until, a later record may lie past the range
    unread: nothing says the cleaner did not remove it."""
    topic = f"validate.unreplaced.{uuid.uuid4().hex[:8]}"
    source, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
    _compacted_topic(source, topic, KEPT)
    _compacted_topic(target, f"{topic}.copy", KEPT)
    producer = Producer({"bootstrap.servers": source, "transactional.id": f"{topic}.seed"})
    producer.init_transactions()
    for key, aborted in ((b"ghost", True), (b"kept", False), (b"kept", False)):
        producer.begin_transaction()
        producer.produce(topic, key=key, value=key + b"-value", partition=0)
        producer.flush(30)
        if aborted:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
    committed = read_all(source, topic, 1)
    assert [r.offset for r in committed] == [2, 4]  # 0 aborted, 1 and 3 markers
    stamp = committed[0].timestamp
    ghost = ReadRecord(0, 0, b"ghost", b"ghost-value", [], stamp)
    # Offset 1 as if a "kept" record there had been replaced by offset 2 and cleaned away, and
    # offset 3 as if a tombstone there had been cleaned away.
    replaced = dataclasses.replace(committed[0], offset=1)
    tombstone = ReadRecord(0, 3, b"erased", None, [], stamp)
    copies = [ghost, replaced, committed[0], tombstone, committed[1]]
    _copy(target, f"{topic}.copy", copies, source_cluster.cluster_id)

    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
        "KAFKA_CLUSTERS_SOURCE_TOPIC": topic,
        "KAFKA_CLUSTERS_DESTINATION_TOPIC": f"{topic}.copy",
    }
    args = ["--plan", plan]
    if until:
        args += ["--until", str(int(time.time() * 1000) + 3_600_000)]
    audit = run_validate(env, tmp_path / "audit", *args)
    assert audit.report is not None, audit.stdout + audit.stderr
    [row] = audit.report["partitions"]
    if until:
        assert audit.status == 0, audit.stdout + audit.stderr
        assert (row["unexpected"], row["outside_range"].get("compacted")) == (0, 3), row
        return
    assert audit.status == 1, audit.stdout + audit.stderr
    assert row["unexpected"] == 1, row
    [example] = audit.examples("unexpected")
    assert example["destination_offset"] == 0, example
    assert "no later record of this key" in example["detail"], example
    assert row["outside_range"].get("compacted") == 2, row  # offsets 1 and 3
