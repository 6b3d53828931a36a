"""A destination topic takes whatever stage 2 writes into it. The broker holds a whole record
batch to a topic's max.message.bytes, compressed as it arrives: a source's limit bounded its own
producers' batches, while stage 2 writes the same records uncompressed, in batches of its own.
Had the destination kept its source's limit, a backlog copied in batches larger than a small
limit, or one large record its source took compressed, would be refused for ever (librdkafka
never splits a refused batch): stage 2 would abort and retry the same transaction without end."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from localkafka.install import ensure_kafka
from replicator.topics import DESTINATION_MIN_MAX_MESSAGE_BYTES, UNBOUNDED_MS
from runtime.names import FlowNames
from tests.kafka_helpers import create_topic
from tests.replication.scrape import await_metric, free_port, sample, scrape
from tests.replication.staging import (
    assert_exactly_once,
    await_records,
    await_staging_complete,
    read_source,
)
from tests.replication.test_deduplicator import _await_destination, _flow_env, _flow_name

SMALL_LIMIT = 64 * 1024
BACKLOG = 3_000  # records of 1 KiB a topic of two partitions: batches far beyond SMALL_LIMIT
LARGE = 3 * 1024 * 1024  # one record, compressed by its producer far below the default 1 MB
PARTITIONS = 3
STAMPED_PRODUCER = Path(__file__).with_name("java") / "StampedProducer.java"


def test_a_small_batch_limit_and_a_record_its_source_took_compressed_reach_the_destination(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    small = unique_topic("small-limit")
    create_topic(
        source_cluster.bootstrap_servers, small, 2, {"max.message.bytes": str(SMALL_LIMIT)}
    )
    compressed = unique_topic("compressed")
    create_topic(source_cluster.bootstrap_servers, compressed, 1)  # the default limit, 1 MB

    # Each source batch within the small limit, as that topic's own producers' are.
    producer = Producer(
        {"bootstrap.servers": source_cluster.bootstrap_servers, "batch.size": SMALL_LIMIT // 2}
    )
    for i in range(BACKLOG):
        producer.produce(small, key=b"%d" % i, value=os.urandom(1024), partition=i % 2)
    assert producer.flush(30) == 0
    zstd = Producer(
        {
            "bootstrap.servers": source_cluster.bootstrap_servers,
            "compression.type": "zstd",
            "message.max.bytes": 2 * LARGE,
        }
    )
    zstd.produce(compressed, value=b"a large record, compressed well; " * (LARGE // 33))
    zstd.produce(compressed, value=b"after it")
    assert zstd.flush(30) == 0
    source = read_source(source_cluster.bootstrap_servers, [small, compressed])

    flow = _flow_name(unique_topic)
    include = f"{re.escape(small)}|{re.escape(compressed)}"
    env = _flow_env(source_cluster, target_cluster, tmp_path, flow, include)
    roles.start("replicator", env)
    # Stage 2 starts on a backlog: it writes it in transactions of many records a partition.
    await_staging_complete(
        target_cluster.bootstrap_servers, FlowNames(flow).staging, source, timeout_s=60
    )
    roles.start("deduplicator", env)
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source, 90))

    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    configs = {
        resource.name: future.result(10)["max.message.bytes"].value
        for resource, future in admin.describe_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, t) for t in (small, compressed)]
        ).items()
    }
    assert configs == dict.fromkeys((small, compressed), str(DESTINATION_MIN_MAX_MESSAGE_BYTES))


def test_records_stamped_far_ahead_or_long_ago_reach_the_destination(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """The broker judges a CreateTime record's timestamp against its own clock as the record
    arrives (message.timestamp.after.max.ms: 1 hour from Kafka 4.0 on, unbounded before). A
    source before 4.0 takes a record stamped two hours ahead; a destination on its defaults
    refused it for ever, and stage 2 retried the same transaction without end."""
    topic = unique_topic("stamped")
    create_topic(
        source_cluster.bootstrap_servers,
        topic,
        1,
        {"message.timestamp.after.max.ms": UNBOUNDED_MS},  # what every source before 4.0 has
    )
    now_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i, stamped in enumerate((now_ms - 30 * 86_400_000, now_ms + 2 * 3_600_000, now_ms)):
        producer.produce(topic, key=b"%d" % i, value=os.urandom(100), timestamp=stamped)
    assert producer.flush(30) == 0
    source = read_source(source_cluster.bootstrap_servers, [topic])

    flow = _flow_name(unique_topic)
    env = _flow_env(source_cluster, target_cluster, tmp_path, flow, re.escape(topic))
    roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", env)
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source, 60))
    assert deduplicator.terminate(30) == 0

    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    bounds = ("message.timestamp.after.max.ms", "message.timestamp.before.max.ms")
    assert {k: configs[k].value for k in bounds} == dict.fromkeys(bounds, UNBOUNDED_MS)


# A destination made before the flow, with a limit its source does not have: the record that
# breaks it, and what makes the topic take it.
REFUSING = {
    "size": ({"max.message.bytes": "20000"}, {"max.message.bytes": "1048588"}),
    "timestamp": (
        {"message.timestamp.after.max.ms": "3600000"},
        {"message.timestamp.after.max.ms": UNBOUNDED_MS},
    ),
}


@pytest.mark.parametrize("limit", sorted(REFUSING))
def test_a_destination_refusing_a_record_for_good_stops_its_staging_partition_and_loses_nothing(
    source_cluster, target_cluster, unique_topic, roles, tmp_path, limit
):
    """An existing destination keeps its configuration (stage 1 changes none): one that
    refuses a record its source took (larger than its max.message.bytes, stamped beyond its
    message.timestamp bounds) had stage 2 abort and retry the same transaction twice a second
    without end, or exit on the next record it wrote into the failed transaction. Now the
    staging partition that carries the record stops, said and gauged, the others go on, and
    once the topic takes the record a restart of stage 2 writes everything, each record once
    (docs/design.md, invariant 7)."""
    topic = unique_topic(f"refused-{limit}")
    refusing, taking = REFUSING[limit]
    create_topic(
        source_cluster.bootstrap_servers,
        topic,
        PARTITIONS,
        {"message.timestamp.after.max.ms": UNBOUNDED_MS},  # as every source before 4.0
    )
    create_topic(target_cluster.bootstrap_servers, topic, PARTITIONS, refusing)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})

    def produce(label: bytes) -> None:
        for i in range(10 * PARTITIONS):
            producer.produce(
                topic, value=b"%s-%d " % (label, i) + os.urandom(90), partition=i % PARTITIONS
            )
        assert producer.flush(30) == 0

    produce(b"before")
    flow = _flow_name(unique_topic)
    env = _flow_env(source_cluster, target_cluster, tmp_path, flow, re.escape(topic))
    port = str(free_port())
    roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", {**env, "METRICS_PORT": port})
    before = read_source(source_cluster.bootstrap_servers, [topic])
    assert_exactly_once(source_cluster, before, _await_destination(target_cluster, before, 60))

    # The refused record on partition 1, between records every partition gets after it.
    if limit == "size":
        producer.produce(topic, value=os.urandom(40_000), partition=1)
    else:
        ahead_ms = int(time.time() * 1000) + 2 * 3_600_000
        producer.produce(topic, value=os.urandom(100), partition=1, timestamp=ahead_ms)
    produce(b"after")
    source = read_source(source_cluster.bootstrap_servers, [topic])
    staged = await_staging_complete(
        target_cluster.bootstrap_servers, FlowNames(flow).staging, source, 60
    )
    lane_of = {(s.envelope.topic, s.envelope.partition): s.partition for s in staged}
    lane = lane_of[(topic, 1)]

    deduplicator.wait_for_log("staging partition stopped", timeout_s=60)
    log = deduplicator.log_text(since_start=True)
    assert re.search(
        rf"reason=refused partition={lane} destination={re.escape(topic)} "
        r"destination_partition=1 ",
        log,
    ), log
    # Not an exit on the next produce into the failed transaction ("Unable to produce message:
    # Local: Erroneous state", code _STATE).
    assert "_STATE" not in log, log
    assert "Erroneous state" not in log, log
    assert deduplicator.is_running()
    stopped = sample(
        scrape(port),
        "exactly_deduplicator_partitions_stopped",
        partition=str(lane),
        reason="refused",
    )
    assert stopped == 1
    # The source partition of the record holds what came before it; the others its staging
    # partition carries hold a prefix (their envelopes staged ahead of the record's may have
    # committed), the rest go on to the end.
    held = {key for key, at in lane_of.items() if at == lane}
    least = {key: before[key] if key in held else records for key, records in source.items()}
    destination = _await_each_partition(target_cluster, least)
    expected = {
        key: records[: max(len(before[key]), len(destination.get(key, [])))]
        if key in held and key != (topic, 1)
        else least[key]
        for key, records in source.items()
    }
    assert_exactly_once(source_cluster, expected, destination)
    aborted = log.count('msg="transaction aborted"')
    # Absence over a while, which no condition can await: the loop this replaced aborted the
    # same transaction twice a second.
    time.sleep(3)
    assert deduplicator.log_text(since_start=True).count('msg="transaction aborted"') == aborted
    assert deduplicator.terminate(30) == 0

    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in taking.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)
    deduplicator = roles.start("deduplicator", env, name="after-the-fix")
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source, 60))
    assert deduplicator.is_running()


def test_a_record_stamped_0_is_written_with_the_time_of_writing_counted_and_said(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """librdkafka takes a timestamp of 0 for "now" (rd_kafka_msg_new0), so no librdkafka client
    can write a CreateTime of 0: stage 2 writes such a record with the time of writing. Not
    silently (docs/design.md §11): counted, and said once per destination partition. The
    records around it keep theirs."""
    topic = unique_topic("stamped-0")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    stamps = ["0", "5", "0"]
    java = subprocess.run(
        [
            "java",
            "-cp",
            ensure_kafka().classpath,
            str(STAMPED_PRODUCER),
            source_cluster.bootstrap_servers,
            topic,
            *stamps,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert java.returncode == 0, java.stderr
    source = read_source(source_cluster.bootstrap_servers, [topic])
    assert [r.timestamp for r in source[(topic, 0)]] == [0, 5, 0]

    flow = _flow_name(unique_topic)
    env = _flow_env(source_cluster, target_cluster, tmp_path, flow, re.escape(topic))
    port = str(free_port())
    before_ms = int(time.time() * 1000)
    roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", {**env, "METRICS_PORT": port})
    [copied] = _await_destination(target_cluster, source, 60).values()
    assert [r.value for r in copied] == [r.value for r in source[(topic, 0)]]
    first, kept, last = (r.timestamp for r in copied)
    assert kept == 5
    assert before_ms <= first <= last <= int(time.time() * 1000)
    # Counted as the commit returns, which this reader of the destination can outrun.
    assert await_metric(port, "exactly_deduplicator_records_restamped_total", 2) == 2
    said = re.findall(
        rf"records stamped 0 written with the time of writing.* topic={re.escape(topic)} "
        r"partition=0 ",
        deduplicator.log_text(since_start=True),
    )
    assert len(said) == 1


def _await_each_partition(target_cluster, least, timeout_s: float = 60.0):
    """The destination once each source partition's copy holds at least its ``least`` records
    (a total count could be reached by one partition ahead while another is still behind)."""
    topics = {topic for topic, _ in least}
    deadline = time.monotonic() + timeout_s
    while True:
        destination = await_records(target_cluster.bootstrap_servers, topics, 0, timeout_s)
        behind = [
            key for key, records in least.items() if len(destination.get(key, [])) < len(records)
        ]
        if not behind or time.monotonic() > deadline:
            return destination
        time.sleep(0.5)
