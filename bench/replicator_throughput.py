"""Stage 1 throughput beside a plain confluent-kafka consume->produce loop, in one invocation.

    python -m bench.replicator_throughput [--records-100b N] [--records-1kib N]

Starts two local Kafka clusters (localkafka), fills a 12-partition source topic per record size,
then copies it twice, each from an assignment to its last record on the target:
  baseline: one process, batched consume(), produce() of every record (key, value, headers,
            timestamp, same partition) with the same producer settings stage 1 uses;
  stage 1:  `python -m replicator` as a process (envelopes into staging), until its committed
            source offsets reach the end.
Reports records/s, MB/s, CPU seconds per million records, and stage 1 / baseline ratios.
Timings on a 2-core machine are noisy: compare ratios within one run, not absolute numbers.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from runtime import PREFETCH_DEFAULTS, produce_when_room
from runtime.names import FlowNames

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.clusters import bench_clusters
from bench.common import COPY_TIMEOUT_S, await_committed, process_cpu_seconds
from bench.flowmeter import EndOffsets
from bench.payloads import Payloads
from localkafka import RoleProcess
from replicator.clients import SOURCE_FETCH_PARTITION_BYTES

PARTITIONS = 12
HEADERS = [("trace", b"0123456789abcdef")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-100b", type=int, default=1_000_000)
    parser.add_argument("--records-1kib", type=int, default=300_000)
    args = parser.parse_args()
    with bench_clusters("bench-replicator-") as (base, clusters):
        source, target = (c.bootstrap_servers for c in clusters)
        rows = []
        for size, count in ((100, args.records_100b), (1024, args.records_1kib)):
            topic = f"bench-{size}"
            create_topic(source, topic)
            fill(source, topic, size, count)
            baseline = plain_loop(source, target, topic, count)
            stage1 = _stage1(source, target, topic, count, base)
            rows.append((size, count, baseline, stage1))
    _report(rows)


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    create_topics(bootstrap, {topic: partitions})


def create_topics(bootstrap: str, topics: dict[str, int], record_limit: int = 0) -> None:
    """Each topic (name -> partitions) at the broker's default replication factor, in one
    request, then a second for their leaders to be known; ``record_limit`` (bytes, 0: the
    broker's default) is each topic's max.message.bytes."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"max.message.bytes": str(record_limit)} if record_limit else {}
    futures = admin.create_topics([NewTopic(t, n, -1, config=config) for t, n in topics.items()])
    for future in futures.values():
        future.result(30 + len(topics) / 10)
    time.sleep(1)


def fill(bootstrap: str, topic: str, size: int, count: int) -> None:
    fill_spread(bootstrap, [(topic, p) for p in range(PARTITIONS)], size, count)


def fill_spread(
    bootstrap: str, partitions: list[tuple[str, int]], size: int, count: int, record_limit: int = 0
) -> None:
    """``count`` records of ``size`` bytes round-robin over ``partitions`` (topic, partition);
    ``record_limit``: as create_topics'."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "compression.type": "lz4",
            "acks": "1",
            **_message_max_bytes(record_limit),
        }
    )
    payloads = Payloads(size)  # a different value for every record (bench/payloads.py)
    for i in range(count):
        topic, partition = partitions[i % len(partitions)]
        produce_when_room(
            producer,
            topic,
            value=payloads.value(i),
            key=b"k%d" % i,
            partition=partition,
            headers=HEADERS,
        )
    producer.flush(120)


def _message_max_bytes(record_limit: int) -> dict[str, int]:
    return {"message.max.bytes": record_limit} if record_limit else {}


def producer_settings() -> dict:
    # What stage 1's staging producer uses (replicator/clients.py), so only the work differs.
    return {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "max.in.flight.requests.per.connection": 5,
    }


def plain_loop(
    source: str, target: str, topic: str, count: int, out: str = ""
) -> tuple[float, float]:
    """Plain loop: every record produced on its own to the same partition, into `out` (default
    `<topic>-baseline`). (seconds, cpu)."""
    return plain_copy(
        source, target, {topic: PARTITIONS}, count, {topic: out or f"{topic}-baseline"}
    )


def plain_copy(
    source: str,
    target: str,
    topics: dict[str, int],
    count: int,
    renamed: dict[str, str],
    record_limit: int = 0,
) -> tuple[float, float]:
    """plain_loop over several source topics (name -> partitions), each into the topic
    ``renamed`` gives it on the target; ``record_limit``: as create_topics'. (seconds, cpu)."""
    create_topics(target, {renamed[t]: n for t, n in topics.items()}, record_limit)
    consumer = Consumer(
        {
            "bootstrap.servers": source,
            "group.id": "bench-baseline",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            # Stage 1's fetch settings: only the work differs.
            "max.partition.fetch.bytes": SOURCE_FETCH_PARTITION_BYTES,
            **PREFETCH_DEFAULTS,
        }
    )
    # No delivery callback per record: the cheapest loop there is (a callback per record costs
    # 40-55 % more, docs/design.md §10); delivery is checked once at the end instead.
    producer = Producer(
        {"bootstrap.servers": target, **producer_settings(), **_message_max_bytes(record_limit)}
    )
    consumer.assign([TopicPartition(t, p, 0) for t, n in topics.items() for p in range(n)])
    started, cpu_started = time.monotonic(), time.process_time()
    consumed = 0
    while consumed < count:
        for message in consumer.consume(2000, 0.5):
            if message.error():
                continue
            consumed += 1
            produce_when_room(
                producer,
                renamed[message.topic()],
                value=message.value(),
                key=message.key(),
                partition=message.partition(),
                headers=message.headers(),
                timestamp=message.timestamp()[1],
            )
        producer.poll(0)
    remaining = producer.flush(120)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu_started
    consumer.close()
    outputs = [(renamed[t], n) for t, n in topics.items()]
    written = EndOffsets(target, outputs, committed=False).total()
    if remaining or written != count:
        raise RuntimeError(f"baseline wrote {written} of {count} ({remaining} undelivered)")
    return seconds, cpu


def _stage1(source: str, target: str, topic: str, count: int, base: Path) -> tuple[float, float]:
    flow = f"bench-{topic}"
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
        "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
    }
    # The end is when stage 1 has committed every source offset: all acknowledged in staging.
    watcher = Consumer({"bootstrap.servers": source, "group.id": FlowNames(flow).replicator_group})
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with RoleProcess("replicator", env, base) as replicator:
        replicator.wait_for_log("partitions assigned", timeout_s=120)
        started, cpu_started = time.monotonic(), process_cpu_seconds(replicator.pid)
        await_committed(watcher, partitions, count, replicator, COPY_TIMEOUT_S)
        seconds, cpu = time.monotonic() - started, process_cpu_seconds(replicator.pid) - cpu_started
        replicator.terminate(60)
    watcher.close()
    return seconds, cpu


def _report(rows: list) -> None:
    print(f"source topic of {PARTITIONS} partitions, one header per record; one run each")
    print(f"{'value':>6} {'records':>8}  {'loop':<9} {'rec/s':>10} {'MB/s':>7} {'cpu s/M':>8}")
    for size, count, baseline, stage1 in rows:
        megabytes = count * (size + 24) / 1e6
        for name, (seconds, cpu) in (("baseline", baseline), ("stage 1", stage1)):
            print(
                f"{size:>5}B {count:>8}  {name:<9} {count / seconds:>10,.0f} "
                f"{megabytes / seconds:>7.1f} {cpu / count * 1e6:>8.2f}"
            )
        print(
            f"{'':>6} {'':>8}  ratio stage 1/baseline: throughput {baseline[0] / stage1[0]:.2f}x, "
            f"cpu per record {stage1[1] / baseline[1]:.2f}x"
        )


if __name__ == "__main__":
    main()
