"""`exactly validate` beside reading both topics once with a plain consumer, in one invocation.

    python -m bench.validator_vs_consumer [--records N] [--partitions P] [--record-bytes B]
                                          [--plans auto,join] [--json PATH]

Issues 6 and 20's measure. Starts two local Kafka clusters (localkafka), fills a source topic (key
b"k<i>", a value of --record-bytes bytes, current timestamps) and copies it to a destination
topic on the other cluster as the pipeline would: the same partition, key, value, headers and
timestamp, plus the provenance header. Neither step is part of the comparison. Then:
  baseline: one process, a plain read_committed confluent-kafka consumer per cluster, batched
            consume(), reads both topics from offset 0 to their end offsets once, touching every
            value; run twice and the faster kept, as the first read may warm the page cache;
  validate: `exactly validate` as a process (Spark local[*]), wall time including Spark's
            start-up, and the peak resident memory of its driver: the Python process and Spark's
            JVM, sampled every 0.2 s, with each one's own high-water mark (VmHWM); once per plan
            (--plans): auto (the merge, one task per partition pair) and join (--plan join, the
            joins and windows that issue 6 measured).
The baseline is read twice before the audits and once after, and the fastest read kept.
Goal (issue 20): validate within 1.5x of the baseline at 5 M records, 2x at fewer. Timings on a
2-core machine are noisy: compare the ratio within one run, not absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runtime import produce_when_room

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import copy_as_stage_2, print_rows, say
from bench.payloads import Payloads
from bench.validate_run import validate_plan
from localkafka import LocalCluster, start_all
from runtime.settings import role_environment
from runtime.topics import ensure_topic

ROOT = Path(__file__).resolve().parents[1]
GOAL_RATIO = 1.5  # at 5 M records and more
GOAL_RATIO_SMALL = 2.0  # below: Spark's fixed start-up weighs more
PLANS = ("auto", "join")
CONSUME_BATCH = 10_000


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument(
        "--plans",
        default=",".join(PLANS),
        help="The plans to time, comma-separated (auto: the merge; join: --plan join).",
    )
    parser.add_argument("--json", type=Path, help="Also write the numbers here.")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    plans = [plan.strip() for plan in args.plans.split(",") if plan.strip()]
    count, partitions = args.records, args.partitions
    with tempfile.TemporaryDirectory(prefix="bench-validator-") as tmp:
        base = Path(tmp)
        clusters = [LocalCluster.create(base / name, name) for name in ("source", "target")]
        start_all(clusters, tie_to_parent=True)
        source, target = (c.bootstrap_servers for c in clusters)
        source_topic, destination_topic = "bench-validate", "bench-validate-copy"
        try:
            fill_s, copy_s = _prepare(
                (source, source_topic), (target, destination_topic), partitions, args, count
            )
            sides = [(source, source_topic), (target, destination_topic)]
            load_before_baseline = os.getloadavg()[0]
            reads = []
            for run in (1, 2):
                reads.append(_read_both(sides, partitions, 2 * count))
                say(f"baseline read {run}: {reads[-1]:.2f} s")
            settings = {
                "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
                "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
                "KAFKA_CLUSTERS_SOURCE_TOPIC": source_topic,
                "KAFKA_CLUSTERS_DESTINATION_TOPIC": destination_topic,
            }
            load_before_validate = os.getloadavg()[0]
            validations = {
                plan: validate_plan(settings, base / f"validate-{plan}", count, plan)
                for plan in plans
            }
            # Once more after: the machine may have been slower or faster meanwhile.
            reads.append(_read_both(sides, partitions, 2 * count))
            say(f"baseline read 3: {reads[-1]:.2f} s")
            spark_read = _spark_read(sides, 2 * count)
            say(f"Spark's plain read: {spark_read:.2f} s")
        finally:
            for cluster in clusters:
                cluster.stop()
    numbers = {
        "records": count,
        "partitions": partitions,
        "record_bytes": args.record_bytes,
        "fill_seconds": round(fill_s, 2),
        "copy_seconds": round(copy_s, 2),
        **_read_numbers(reads, spark_read, validations),
        "goal_ratio": GOAL_RATIO if count >= 5_000_000 else GOAL_RATIO_SMALL,
        "load_average_before_baseline": round(load_before_baseline, 2),
        "load_average_before_validate": round(load_before_validate, 2),
    }
    _report(numbers)
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")


def _prepare(
    source: tuple[str, str],
    destination: tuple[str, str],
    partitions: int,
    args: argparse.Namespace,
    count: int,
) -> tuple[float, float]:
    """The source topic filled, then copied with provenance (neither part of the comparison):
    the seconds each took."""
    (source_bootstrap, source_topic), (target, destination_topic) = source, destination
    ensure_topic(
        AdminClient({"bootstrap.servers": source_bootstrap}), NewTopic(source_topic, partitions)
    )
    fill_s = _timed(_fill, source_bootstrap, source_topic, partitions, args.record_bytes, count)
    say(f"filled {count:,} records in {fill_s:.1f} s ({count / fill_s:,.0f}/s)")
    ensure_topic(
        AdminClient({"bootstrap.servers": target}), NewTopic(destination_topic, partitions)
    )
    copy_s = _timed(
        _copy, source_bootstrap, source_topic, target, destination_topic, partitions, count
    )
    say(f"copied them with provenance in {copy_s:.1f} s ({count / copy_s:,.0f}/s)")
    return fill_s, copy_s


def _read_numbers(reads: list[float], spark_read: float, validations: dict[str, dict]) -> dict:
    return {
        "baseline_seconds_each_run": [round(s, 2) for s in reads],
        "baseline_seconds": round(min(reads), 2),
        "spark_read_seconds": round(spark_read, 2),
        "validate": {
            plan: {
                **validation,
                "ratio": round(validation["validate_wall_seconds"] / min(reads), 2),
            }
            for plan, validation in validations.items()
        },
    }


def _fill(bootstrap: str, topic: str, partitions: int, size: int, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 30, "compression.type": "lz4", "acks": "1"}
    )
    payloads = Payloads(size)  # a different value for every record (bench/payloads.py)
    for i in range(count):
        produce_when_room(
            producer, topic, value=payloads.value(i), key=b"k%d" % i, partition=i % partitions
        )
    if producer.flush(300):
        raise RuntimeError("fill: records left undelivered")
    _check_written(bootstrap, topic, partitions, count)


def _copy(
    source: str, source_topic: str, target: str, topic: str, partitions: int, count: int
) -> None:
    """Every source record to the same partition of ``topic``, with the provenance header the
    deduplicator writes, so that validate pairs records by it as it would after the pipeline."""
    cluster_id = AdminClient({"bootstrap.servers": source}).list_topics(timeout=10).cluster_id
    consumer = _consumer(source)
    # Idempotent: a retried batch is neither duplicated nor reordered, so the copy is clean.
    producer = Producer(
        {
            "bootstrap.servers": target,
            "enable.idempotence": True,
            "linger.ms": 30,
            "compression.type": "lz4",
        }
    )
    consumer.assign([TopicPartition(source_topic, p, 0) for p in range(partitions)])
    copied = 0
    while copied < count:
        for message in consumer.consume(CONSUME_BATCH, 0.5):
            if message.error():
                raise RuntimeError(f"copy: {message.error()}")
            copy_as_stage_2(producer, topic, message, cluster_id)
            copied += 1
        producer.poll(0)
    consumer.close()
    if producer.flush(300):
        raise RuntimeError("copy: records left undelivered")
    _check_written(target, topic, partitions, count)


def _check_written(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    consumer = _consumer(bootstrap)
    written = sum(_partition_sizes(consumer, topic, partitions))
    consumer.close()
    if written != count:
        raise RuntimeError(f"{topic}: {written} records written of {count}")


def _read_both(sides: list[tuple[str, str]], partitions: int, count: int) -> float:
    """Seconds to read every record of both topics once: a consumer per cluster, both fetching
    at once in this one process, from the end offsets' lookup to the last record."""
    started = time.monotonic()
    remaining = {}
    for bootstrap, topic in sides:
        consumer = _consumer(bootstrap)
        # Neither topic is transactional: its records fill its offsets, no marker among them.
        remaining[consumer] = sum(_partition_sizes(consumer, topic, partitions))
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    if sum(remaining.values()) != count:
        raise RuntimeError(f"baseline: {sum(remaining.values())} records to read, not {count}")
    consumers = list(remaining)
    value_bytes = 0
    while remaining:
        for consumer in list(remaining):
            for message in consumer.consume(CONSUME_BATCH, 0.1):
                if message.error():
                    raise RuntimeError(f"baseline: {message.error()}")
                value_bytes += len(message.value())
                remaining[consumer] -= 1
            if remaining[consumer] <= 0:
                del remaining[consumer]
    seconds = time.monotonic() - started
    for consumer in consumers:
        consumer.close()
    if not value_bytes:
        raise RuntimeError("baseline: no value read")
    return seconds


# Spark's Kafka source reading both topics once and counting what it read, in a process of its
# own as validate runs: the same session settings and read options as the join plan
# (validator/read.py).
_SPARK_READ = """
import sys
from pyspark.sql import functions as F
from validator.session import spark_session
spark = spark_session(None, {})
frames = [
    spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
    .option("kafka.max.poll.records", "10000").option("kafka.fetch.max.wait.ms", "10")
    .option("kafka.max.partition.fetch.bytes", str(8 * 1024 * 1024))
    .option("kafka.fetch.max.bytes", str(64 * 1024 * 1024)).load()
    for bootstrap, topic in (side.split("=", 1) for side in sys.argv[1:])
]
both = frames[0].unionByName(frames[1])
# One job over both topics, every value touched (its length summed), as the baseline does.
count, _value_bytes = both.agg(F.count("*"), F.sum(F.length("value"))).collect()[0]
spark.stop()
print(count)
"""


def _spark_read(sides: list[tuple[str, str]], count: int) -> float:
    """Seconds for Spark's own Kafka source to read both topics, start-up included."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _SPARK_READ, *(f"{b}={t}" for b, t in sides)],
        env=role_environment({"SPARK_LOCAL_IP": "127.0.0.1"}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0 or int(done.stdout.split()[-1]) != count:
        raise SystemExit(f"Spark's plain read: {done.stdout[-500:]} {done.stderr[-2000:]}")
    return seconds


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-validator-unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def _partition_sizes(consumer: Consumer, topic: str, partitions: int) -> list[int]:
    sizes = []
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        sizes.append(high - low)
    return sizes


def _timed(function, *args) -> float:
    started = time.monotonic()
    function(*args)
    return time.monotonic() - started


def _report(n: dict) -> None:
    count, baseline = n["records"], n["baseline_seconds"]
    runs = ", ".join(f"{s:.2f}" for s in n["baseline_seconds_each_run"])

    def mib(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f} MiB"

    rows = [
        ("records per topic", f"{count:,} of {n['record_bytes']} B, {n['partitions']} partitions"),
        ("not compared: fill, copy", f"{n['fill_seconds']:.1f} s, {n['copy_seconds']:.1f} s"),
        (
            "baseline: read both topics",
            f"{baseline:.2f} s  {2 * count / baseline:,.0f} records/s  "
            f"(fastest of three runs: {runs})",
        ),
        (
            "context: Spark's plain read of both",
            f"{n['spark_read_seconds']:.2f} s  (its Kafka source, one job, start-up included)",
        ),
    ]
    for plan, v in n["validate"].items():
        wall = v["validate_wall_seconds"]
        rows += [
            (
                f"validate --plan {plan}: wall",
                f"{wall:.2f} s  {2 * count / wall:,.0f} records/s, start-up included",
            ),
            (
                "  ratio to the baseline",
                f"{v['ratio']:.2f}x  (goal <= {n['goal_ratio']:.1f}x; "
                f"{wall / n['spark_read_seconds']:.2f}x Spark's plain read; report's own seconds "
                f"{v['validate_report_seconds']:.1f})",
            ),
            (
                "  peak RSS: driver, JVM, sum",
                f"{mib(v['peak_rss_python_driver_mib'])}, {mib(v['peak_rss_jvm_mib'])} "
                f"(VmHWM {mib(v['hwm_jvm_mib'])}), {mib(v['peak_rss_sum_mib'])}",
            ),
        ]
    print_rows(rows)
    print(
        "records/s count both topics. One run on a 2-core machine, where the brokers, Spark and "
        "the baseline share the cores with whatever else runs (load average "
        f"{n['load_average_before_baseline']:.1f} before the baseline, "
        f"{n['load_average_before_validate']:.1f} before validate): the ratio is noisy, compare "
        "it within one run; with few records Spark's fixed start-up dominates it."
    )


if __name__ == "__main__":
    main()
