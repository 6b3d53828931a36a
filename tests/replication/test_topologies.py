"""Topologies beyond one source and one target (issue 19), each as processes on the local
clusters: active-active (A->B and B->A on the same topic names at once), one source fanned out
to two targets, and the Schema Registry's `_schemas` topic."""

from __future__ import annotations

import random
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from envelope import HEADER_PROVENANCE, carries_provenance, decode_provenance, find_provenance
from offsetsync.groups import TRANSLATED_MARK
from tests.backends import cold_cluster
from tests.kafka_helpers import create_topic
from tests.offsetsync.groups import await_committed, process_and_stop
from tests.replication.datamix import ContinuousProducer
from tests.replication.scrape import await_metric, free_port, sample, scrape
from tests.replication.staging import SourceRecord, await_records, read_source
from tests.validator.running import run_validate

PARTITIONS = 4


def _flow(source, target, tmp_path: Path, name: str, include: str, **extra: str):
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": include,
        "REPLICATION_FLOW": name,
        "REPLICATION_ENVELOPE_MAX_RECORDS": "50",  # many envelopes: kills land between them
        "REPLICATION_STAGING_PARTITIONS": "4",
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / name / "state"),
        **extra,
    }


def _content(record: SourceRecord) -> tuple[object, ...]:
    headers = tuple(h for h in record.headers if h[0] != HEADER_PROVENANCE)
    return (record.key, record.value, headers, record.timestamp)


def _is_copy(record: SourceRecord) -> bool:
    return carries_provenance(record.headers)


def _one_direction(origin, records_at_origin, records_there) -> list[str]:
    """What is wrong with one direction of a pair: each record produced at the origin (no
    header) must be at the other cluster exactly once, in order, unchanged, with provenance
    naming it; and nothing there may be a copy of a copy (a record that came back)."""
    problems = []
    for (topic, partition), records in sorted(records_at_origin.items()):
        local = [r for r in records if not _is_copy(r)]
        copies = [r for r in records_there.get((topic, partition), []) if _is_copy(r)]
        if [_content(r) for r in copies] != [_content(r) for r in local]:
            problems.append(
                f"{topic}[{partition}]: {len(local)} local records, {len(copies)} copies"
            )
            continue
        origins = [decode_provenance(dict(r.headers)[HEADER_PROVENANCE]) for r in copies]
        wanted = [(origin.cluster_id, partition, r.offset) for r in local]
        if [(o.source_cluster_id, o.partition, o.offset) for o in origins] != wanted:
            problems.append(f"{topic}[{partition}]: provenance does not name the origin")
    for (topic, partition), records in sorted(records_there.items()):
        for record in records:
            headers = [value for name, value in record.headers if name == HEADER_PROVENANCE]
            if len(headers) > 1:
                problems.append(f"{topic}[{partition}]@{record.offset}: copied twice (a loop)")
    return problems


def _await_both_ways(clusters, topic: str, timeout_s: float = 120.0):
    """Each cluster's records, once each holds the other's local records as copies."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = {c.name: read_source(c.bootstrap_servers, [topic]) for c in clusters}
        local = {
            name: sum(not _is_copy(r) for rs in by_partition.values() for r in rs)
            for name, by_partition in records.items()
        }
        copies = {
            name: sum(_is_copy(r) for rs in by_partition.values() for r in rs)
            for name, by_partition in records.items()
        }
        a, b = (c.name for c in clusters)
        if (copies[b] >= local[a] and copies[a] >= local[b]) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


# A minute or more of four stages on two cores: in make test-slow, to keep the default suite
# inside its 20 minutes.
@pytest.mark.slow
def test_active_active_under_load_with_each_role_killed_is_exactly_once_both_ways_and_never_loops(
    source_cluster, target_cluster, unique_topic, unique_group, roles, tmp_path
):
    """A->B and B->A on the same topic name, producers on both clusters, a SIGKILL of each of
    the four stages; then every record produced in one cluster is in the other exactly once,
    nothing came back, the audit of each direction is clean, and offset sync in both
    directions leaves a group where its consumer put it."""
    a, b = source_cluster, target_cluster
    topic = unique_topic("aa")
    for cluster in (a, b):
        create_topic(cluster.bootstrap_servers, topic, PARTITIONS)
    suffix = uuid.uuid4().hex[:8]
    group = unique_group("aa-app")
    envs = {
        direction: _flow(
            source,
            target,
            tmp_path,
            f"{direction}-{suffix}",
            topic.replace(".", r"\."),
            OFFSETSYNC_GROUPS_INCLUDE=group.replace(".", r"\."),
            OFFSETSYNC_INTERVAL_MS="300",
        )
        for direction, source, target in (("ab", a, b), ("ba", b, a))
    }
    running = {
        (direction, role): roles.start(role, env)
        for direction, env in envs.items()
        for role in ("replicator", "deduplicator")
    }
    victims = list(running)
    random.Random(19).shuffle(victims)
    with (
        ContinuousProducer(
            a.bootstrap_servers,
            {topic: PARTITIONS},
            records_per_second=300,
            transactional_id=unique_topic("a-txn"),
            label="in-a",
        ) as in_a,
        ContinuousProducer(
            b.bootstrap_servers,
            {topic: PARTITIONS},
            records_per_second=300,
            transactional_id=unique_topic("b-txn"),
            label="in-b",
        ) as in_b,
    ):
        for victim in victims:
            time.sleep(random.Random(victim[0] + victim[1]).uniform(1.0, 2.5))
            running[victim].kill()
            running[victim].start()
        time.sleep(2)
        produced = in_a.stop(), in_b.stop()
    assert min(produced) > 200, produced
    records = _await_both_ways((a, b), topic)
    assert _one_direction(a, records[a.name], records[b.name]) == []
    assert _one_direction(b, records[b.name], records[a.name]) == []
    for direction in envs:
        replicator = running[(direction, "replicator")]
        # The other direction's copies were read by this stage 1 and passed over (and none of
        # them came back: _one_direction above).
        assert "are not copied again" in replicator.log_text(), replicator.log_tail()
        assert "stopped by a fatal error" not in replicator.log_text()

    # Offset sync both ways: a group that consumed in A is moved on B, and B->A, seeing an
    # offset that an offset sync wrote, never translates it back onto A.
    committed = process_and_stop(
        a.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), 100)
    )
    metrics_ports = {direction: str(free_port()) for direction in envs}
    syncs = {
        direction: roles.start(
            "offsetsync",
            {**env, "METRICS_PORT": metrics_ports[direction], "EXACTLY_LOG_LEVEL": "DEBUG"},
        )
        for direction, env in envs.items()
    }
    moved = await_committed(b.bootstrap_servers, group, topic, partitions=PARTITIONS)
    syncs["ba"].wait_for_log("not translated back", timeout_s=60)
    # One per group partition whose offset A->B wrote on B, however many cycles see it.
    await_metric(metrics_ports["ba"], "exactly_offsetsync_passed_back_total", PARTITIONS)
    time.sleep(1)  # more cycles: the count stays
    assert sample(scrape(metrics_ports["ba"]), "exactly_offsetsync_passed_back_total") == PARTITIONS
    for sync in syncs.values():
        assert sync.terminate() == 0
    assert _committed_with_metadata(a.bootstrap_servers, group, topic) == {
        p: (offset, "") for p, offset in committed.items()
    }
    on_b = _committed_with_metadata(b.bootstrap_servers, group, topic)
    assert all(metadata.startswith(TRANSLATED_MARK) for _o, metadata in on_b.values()), on_b
    # From its new position on B the group reads the copies of exactly the records of A it had
    # not processed (B's own records beside them are docs/topologies.md's caveat, not checked here).
    for partition, offset in committed.items():
        unread = [
            _content(r)
            for r in records[a.name][(topic, partition)]
            if r.offset >= offset and not _is_copy(r)
        ]
        start = moved[(topic, partition)]
        after = [r for r in records[b.name][(topic, partition)] if r.offset >= start]
        assert [_content(r) for r in after if _is_copy(r)] == unread, partition

    # The audit of each direction, as a user runs it: clean, the copies counted as looped on
    # the source and the other cluster's own records as local on the destination.
    for direction, env in envs.items():
        audit = run_validate(
            env, tmp_path / f"audit-{direction}", "--two-way", "--require-complete"
        )
        assert audit.status == 0, audit.stdout + audit.stderr
        totals = audit.report["totals"]
        source, there = (a, b) if direction == "ab" else (b, a)
        local = sum(not _is_copy(r) for rs in records[source.name].values() for r in rs)
        assert totals["matched"] == local
        assert totals["looped"] == sum(
            _is_copy(r) for rs in records[source.name].values() for r in rs
        )
        assert totals["local"] == sum(
            not _is_copy(r) for rs in records[there.name].values() for r in rs
        )
        assert audit.report["verdict"] == "clean"
        assert f"({totals['local']:,} local: produced on the destination cluster)" in audit.stdout
        assert f"({totals['looped']:,} looped: source records that are copies" in audit.stdout
    for role in running.values():
        assert role.terminate(30) == 0


def _committed_with_metadata(bootstrap: str, group: str, topic: str) -> dict[int, tuple]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    finally:
        consumer.close()
    return {tp.partition: (tp.offset, tp.metadata or "") for tp in found}


# Four stages as well: in make test-slow too.
@pytest.mark.slow
def test_one_source_fanned_out_to_two_targets_keeps_each_flow_apart_through_a_kill(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """Two flows from one source, each with its own target, staging, state and groups (the
    flow name keeps them apart): while one target's stages are down, the other keeps copying;
    both end exactly once."""
    topic = unique_topic("fan")
    create_topic(source_cluster.bootstrap_servers, topic, PARTITIONS)
    include = topic.replace(".", r"\.")
    with cold_cluster(tmp_path / "second", "second") as second:
        targets = {"one": target_cluster, "two": second}
        envs = {
            name: _flow(
                source_cluster, target, tmp_path, f"fan-{name}-{uuid.uuid4().hex[:6]}", include
            )
            for name, target in targets.items()
        }
        running = {
            (name, role): roles.start(role, env)
            for name, env in envs.items()
            for role in ("replicator", "deduplicator")
        }
        with ContinuousProducer(
            source_cluster.bootstrap_servers,
            {topic: PARTITIONS},
            records_per_second=300,
            transactional_id=unique_topic("fan-txn"),
        ) as producer:
            _await_copies(target_cluster, topic, 1)
            for role in ("replicator", "deduplicator"):
                running[("two", role)].kill()
            before = _count(_await_copies(target_cluster, topic, 1))
            # Target one keeps flowing while target two's stages are down.
            assert _count(_await_copies(target_cluster, topic, before + 100)) >= before + 100
            for role in ("replicator", "deduplicator"):
                running[("two", role)].start()
            time.sleep(2)
            assert producer.stop() > 500
        source = read_source(source_cluster.bootstrap_servers, [topic])
        total = sum(len(r) for r in source.values())
        for name, target in targets.items():
            copies = _await_copies(target, topic, total)
            assert _one_direction(source_cluster, source, copies) == [], name
            assert sum(len(r) for r in copies.values()) == total, name
        for role in running.values():
            assert role.terminate(30) == 0


def _count(records) -> int:
    return sum(len(r) for r in records.values())


def _await_copies(cluster, topic: str, at_least: int, timeout_s: float = 120.0):
    return await_records(cluster.bootstrap_servers, [topic], at_least, timeout_s, every_s=0.3)


# The name Schema Registry gives it (kafkastore.topic's default): not unique per test, so this
# is the one test that writes it on the session's clusters.
SCHEMAS = "_schemas"


def test_the_schema_registry_topic_is_copied_byte_for_byte(
    source_cluster, target_cluster, roles, tmp_path
):
    """`_schemas` as Schema Registry makes it (compacted, one partition) and writes it: JSON
    keys and values, a NOOP record with a null value, a soft delete. Copied as an ordinary
    exactly-once topic: the same bytes, offsets order and configs the registry relies on."""
    create_topic(source_cluster.bootstrap_servers, SCHEMAS, 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    written = []
    for version in range(1, 21):
        key = b'{"keytype":"SCHEMA","subject":"orders-value","version":%d,"magic":1}' % version
        value = (
            b'{"subject":"orders-value","version":%d,"id":%d,"schemaType":"AVRO","schema":'
            b'"{\\"type\\":\\"record\\",\\"name\\":\\"Order\\",\\"fields\\":[{\\"name\\":'
            b'\\"f%d\\",\\"type\\":\\"string\\"}]}","deleted":false}' % (version, version, version)
        )
        written.append((key, value))
    written.append((b'{"keytype":"NOOP","magic":0}', None))
    written.append((written[0][0], written[0][1].replace(b'"deleted":false', b'"deleted":true')))
    for key, value in written:
        producer.produce(SCHEMAS, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    env = _flow(
        source_cluster, target_cluster, tmp_path, f"schemas-{uuid.uuid4().hex[:6]}", SCHEMAS
    )
    for role in ("replicator", "deduplicator"):
        roles.start(role, env)
    copies = _await_copies(target_cluster, SCHEMAS, len(written))
    source = read_source(source_cluster.bootstrap_servers, [SCHEMAS])
    assert [(r.key, r.value) for r in source[(SCHEMAS, 0)]] == written
    # Key, value, headers and timestamp of every record, once each, in order.
    assert _one_direction(source_cluster, source, copies) == []
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    described = admin.list_topics(SCHEMAS, timeout=30).topics[SCHEMAS]
    assert len(described.partitions) == 1
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, SCHEMAS)]).values()
    assert future.result(30)["cleanup.policy"].value == "compact"
    assert find_provenance(copies[(SCHEMAS, 0)][0].headers) is not None
    by_origin: dict[int, int] = defaultdict(int)
    for record in copies[(SCHEMAS, 0)]:
        by_origin[decode_provenance(dict(record.headers)[HEADER_PROVENANCE]).offset] += 1
    assert set(by_origin.values()) == {1}
