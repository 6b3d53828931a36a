"""Stage 1 and stage 2 as processes, end to end: a read_committed consumer of every destination
partition sees exactly the committed records of the same source partition, in order,
byte-identical, each once (issue 5)."""

from __future__ import annotations

import random
import re
import shutil
import time

import pytest
from confluent_kafka import Producer

from envelope import HEADER_PROVENANCE, decode_provenance
from tests.kafka_helpers import create_topic
from tests.replication.datamix import ContinuousProducer, create_data_mix
from tests.replication.processes import role_processes
from tests.replication.staging import read_source


@pytest.fixture
def roles(tmp_path):
    with role_processes(tmp_path) as started:
        yield started


def _content(record, *, provenance: bool):
    headers = [h for h in record.headers if h[0] != HEADER_PROVENANCE]
    return (record.key, record.value, tuple(headers), record.timestamp, record.timestamp_type)


def _await_destination(target, source_records, timeout_s: float = 120.0):
    topics = sorted({topic for topic, _ in source_records})
    expected = sum(len(records) for records in source_records.values())
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            destination = read_source(target.bootstrap_servers, topics)
        except LookupError:  # stage 1 has not created every destination topic yet
            destination = {}
        if sum(len(r) for r in destination.values()) >= expected or time.monotonic() > deadline:
            return destination
        time.sleep(0.5)


def assert_exactly_once(source_cluster, source_records, destination_records):
    problems = []
    for (topic, partition), records in sorted(source_records.items()):
        written = destination_records.get((topic, partition), [])
        want = [_content(r, provenance=False) for r in records]
        got = [_content(r, provenance=False) for r in written]
        if got != want:
            problems.append(f"{topic}[{partition}]: {len(want)} source records, {len(got)} written")
            continue
        origins = [decode_provenance(dict(r.headers)[HEADER_PROVENANCE]) for r in written]
        if [(o.source_cluster_id, o.partition, o.offset) for o in origins] != [
            (source_cluster.cluster_id, partition, r.offset) for r in records
        ]:
            problems.append(f"{topic}[{partition}]: provenance headers do not match")
    assert problems == [], problems[:10]


def test_data_mix_reaches_the_destination_exactly_once(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    mix = create_data_mix(source_cluster.bootstrap_servers, unique_topic("e2e"))
    flow = unique_topic("flow").replace(".", "-")[-90:]
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": mix.include_regex,
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
        "REPLICATION_INSTANCE_ID": "one",
    }
    replicator = roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", env)
    source = read_source(source_cluster.bootstrap_servers, mix.topics)
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0


def test_exactly_once_through_sigkills_of_both_stages_and_a_lost_state_directory(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    topics = {unique_topic("eos-a"): 6, unique_topic("eos-b"): 4}
    for topic, partitions in topics.items():
        create_topic(source_cluster.bootstrap_servers, topic, partitions)
    flow = unique_topic("flow").replace(".", "-")[-90:]
    state_dir = tmp_path / "state"
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": "|".join(re.escape(t) for t in topics),
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(state_dir),
        "REPLICATION_INSTANCE_ID": "one",
        "REPLICATION_ENVELOPE_MAX_RECORDS": "50",
    }
    rng = random.Random(5)
    with ContinuousProducer(
        source_cluster.bootstrap_servers,
        topics,
        records_per_second=500,
        transactional_id=unique_topic("eos-txn"),
    ) as producer:
        replicator = roles.start("replicator", env)
        deduplicator = roles.start("deduplicator", env)
        for kill in range(12):
            time.sleep(rng.uniform(0.5, 2.5))
            victim = deduplicator if kill % 3 else replicator
            victim.kill()
            if kill == 7:
                # A pod that comes back with an empty disk: restore from the changelog.
                shutil.rmtree(state_dir, ignore_errors=True)
            victim.start()
        produced = producer.stop()
    assert produced > 1000
    source = read_source(source_cluster.bootstrap_servers, tuple(topics))
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)
    # Every restart came back by itself: no fatal exit (a crash loop) on the way.
    for role in (deduplicator, replicator):
        assert "stopped by a fatal error" not in role.log_text(), role.log_tail()
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0


def test_a_garbage_staging_record_is_dead_lettered_and_the_rest_flows_on(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    topic = unique_topic("dlq")
    create_topic(source_cluster.bootstrap_servers, topic, 2)
    flow = unique_topic("flow").replace(".", "-")[-90:]
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
        "REPLICATION_INSTANCE_ID": "one",
    }
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(100):
        producer.produce(topic, value=b"before-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    replicator = roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", env)
    deduplicator.wait_for_log("staging partitions assigned", timeout_s=60)
    garbage = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    garbage.produce(f"__exactly.{flow}.staging", value=b"\x00not an envelope", partition=0)
    assert garbage.flush(30) == 0
    for i in range(100):
        producer.produce(topic, value=b"after-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0

    source = read_source(source_cluster.bootstrap_servers, [topic])
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)
    dead = read_source(target_cluster.bootstrap_servers, [f"__exactly.{flow}.deadletter"])
    records = [r for rs in dead.values() for r in rs]
    assert [r.value for r in records] == [b"\x00not an envelope"]
    reason = dict(records[0].headers)["exactly.reason"].decode()
    assert reason.startswith("not an envelope:")
    assert "dead-lettered" in deduplicator.log_text()
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0
