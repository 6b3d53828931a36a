"""A destination topic takes whatever stage 2 writes into it. The broker holds a whole record
batch to a topic's max.message.bytes, compressed as it arrives: a source's limit bounded its own
producers' batches, while stage 2 writes the same records uncompressed, in batches of its own.
Had the destination kept its source's limit, a backlog copied in batches larger than a small
limit, or one large record its source took compressed, would be refused for ever (librdkafka
never splits a refused batch): stage 2 would abort and retry the same transaction without end."""

from __future__ import annotations

import os
import re
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from replicator.topics import DESTINATION_MIN_MAX_MESSAGE_BYTES, UNBOUNDED_MS
from runtime.names import FlowNames
from tests.kafka_helpers import create_topic
from tests.replication.staging import assert_exactly_once, await_staging_complete, read_source
from tests.replication.test_deduplicator import _await_destination, _flow_env, _flow_name

SMALL_LIMIT = 64 * 1024
BACKLOG = 3_000  # records of 1 KiB a topic of two partitions: batches far beyond SMALL_LIMIT
LARGE = 3 * 1024 * 1024  # one record, compressed by its producer far below the default 1 MB


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
