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
from dataclasses import dataclass, field
from pathlib import Path

from runtime import produce_when_room

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.flowmeter import copy_as_stage_2
from bench.payloads import Payloads
from localkafka import LocalCluster, start_all
from runtime.settings import role_environment
from runtime.topics import ensure_topic

ROOT = Path(__file__).resolve().parents[1]
GOAL_RATIO = 1.5  # at 5 M records and more
GOAL_RATIO_SMALL = 2.0  # below: Spark's fixed start-up weighs more
PLANS = ("auto", "join")
CONSUME_BATCH = 10_000
SAMPLE_EVERY_S = 0.2
PYTHON_DRIVER, JVM = "python driver", "jvm"
# Distinct random values, more of them than lz4's 64 KiB window holds: batches of one repeated
# value would compress to almost nothing and spare the brokers' disks an unrealistic amount.
_KIB = 1024


def main() -> None:
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
    args = parser.parse_args()
    plans = [plan.strip() for plan in args.plans.split(",") if plan.strip()]
    count, partitions = args.records, args.partitions
    with tempfile.TemporaryDirectory(prefix="bench-validator-") as tmp:
        base = Path(tmp)
        clusters = [LocalCluster.create(base / name, name) for name in ("source", "target")]
        start_all(clusters, tie_to_parent=True)
        source, target = (c.bootstrap_servers for c in clusters)
        source_topic, destination_topic = "bench-validate", "bench-validate-copy"
        try:
            ensure_topic(
                AdminClient({"bootstrap.servers": source}), NewTopic(source_topic, partitions)
            )
            fill_s = _timed(_fill, source, source_topic, partitions, args.record_bytes, count)
            _say(f"filled {count:,} records in {fill_s:.1f} s ({count / fill_s:,.0f}/s)")
            ensure_topic(
                AdminClient({"bootstrap.servers": target}), NewTopic(destination_topic, partitions)
            )
            copy_s = _timed(
                _copy, source, source_topic, target, destination_topic, partitions, count
            )
            _say(f"copied them with provenance in {copy_s:.1f} s ({count / copy_s:,.0f}/s)")
            sides = [(source, source_topic), (target, destination_topic)]
            load_before_baseline = os.getloadavg()[0]
            reads = []
            for run in (1, 2):
                reads.append(_read_both(sides, partitions, 2 * count))
                _say(f"baseline read {run}: {reads[-1]:.2f} s")
            settings = {
                "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source,
                "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target,
                "KAFKA_CLUSTERS_SOURCE_TOPIC": source_topic,
                "KAFKA_CLUSTERS_DESTINATION_TOPIC": destination_topic,
            }
            load_before_validate = os.getloadavg()[0]
            validations = {
                plan: _validate(settings, base / f"validate-{plan}", count, plan) for plan in plans
            }
            # Once more after: the machine may have been slower or faster meanwhile.
            reads.append(_read_both(sides, partitions, 2 * count))
            _say(f"baseline read 3: {reads[-1]:.2f} s")
            spark_read = _spark_read(sides, 2 * count)
            _say(f"Spark's plain read: {spark_read:.2f} s")
        finally:
            for cluster in clusters:
                cluster.stop()
    numbers = {
        "records": count,
        "partitions": partitions,
        "record_bytes": args.record_bytes,
        "fill_seconds": round(fill_s, 2),
        "copy_seconds": round(copy_s, 2),
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
        "goal_ratio": GOAL_RATIO if count >= 5_000_000 else GOAL_RATIO_SMALL,
        "load_average_before_baseline": round(load_before_baseline, 2),
        "load_average_before_validate": round(load_before_validate, 2),
    }
    _report(numbers)
    if args.json is not None:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")


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


def _validate(settings: dict[str, str], out: Path, count: int, plan: str) -> dict:
    """Run `exactly validate --plan PLAN` as a user would, sampling its memory; its numbers as a
    dict."""
    out.mkdir(parents=True)
    report_path, log_path = out / "report.json", out / "validate.log"
    command = [
        sys.executable,
        "-m",
        "exactly",
        "validate",
        "--report",
        str(report_path),
        "--chart",
        str(out / "report.html"),
        "--plan",
        plan,
    ]
    with log_path.open("w") as log:
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            env=role_environment(settings),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        memory = TreeMemory(process.pid)
        try:
            while process.poll() is None:
                memory.sample()
                time.sleep(SAMPLE_EVERY_S)
        finally:
            if process.poll() is None:
                # SIGTERM unwinds through spark.stop(), which takes Spark's JVM with it.
                process.terminate()
                process.wait(60)
        wall = time.monotonic() - started
    output = log_path.read_text()
    # Its progress lines, one per phase with the seconds the one before took: where time went.
    for line in output.splitlines():
        if line.startswith("exactly validate:"):
            _say(f"  {line}")
    _say(f"validate --plan {plan} exited {process.returncode} after {wall:.1f} s")
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    totals = report["totals"] if report else None
    if process.returncode != 0 or totals is None or totals["matched"] != count:
        print(output[-4000:], file=sys.stderr)
        raise SystemExit(
            f"validate: exit status {process.returncode}, wanted 0 with {count} matched; "
            f"totals: {json.dumps(totals)}"
        )
    planned = {topic["plan"] for topic in report["topics"]} if report else set()
    if plan == "auto" and planned != {"merge"}:
        raise SystemExit(f"validate: the merge did not prove the clean copy (plans: {planned})")
    return {
        "validate_wall_seconds": round(wall, 2),
        "validate_report_seconds": report["seconds"] if report else None,
        "validate_totals": totals,
        **memory.summary(),
    }


@dataclass
class TreeMemory:
    """Resident memory of a process and all its descendants, sampled: the peak of their sum,
    and per process its peak sample and its own high-water mark (VmHWM, kept by the kernel, so
    it also catches what happened between two samples)."""

    root: int
    peak_sum_kib: int = 0
    peak_kib: dict[int, int] = field(default_factory=dict)
    hwm_kib: dict[int, int] = field(default_factory=dict)
    role: dict[int, str] = field(default_factory=dict)

    def sample(self) -> None:
        total = 0
        for pid in _tree(self.root):
            status = _status(pid)
            if status is None or "VmRSS" not in status:
                continue  # gone, or a zombie
            rss = _kib(status["VmRSS"])
            total += rss
            self.peak_kib[pid] = max(self.peak_kib.get(pid, 0), rss)
            self.hwm_kib[pid] = _kib(status.get("VmHWM", "0 kB"))
            # Again each time: spark-submit's shell scripts exec into the JVM under one pid.
            self.role[pid] = self._role(pid, status.get("Name", ""))
        self.peak_sum_kib = max(self.peak_sum_kib, total)

    def _role(self, pid: int, name: str) -> str:
        if pid == self.root:
            return PYTHON_DRIVER
        if name == "java":
            return JVM  # Spark's, and briefly its launcher's (the smaller one)
        if name.startswith("python"):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return name
            return "python worker" if b"pyspark" in command else name
        return name

    def summary(self) -> dict:
        def largest(role: str, of: dict[int, int]) -> int | None:
            values = [of[pid] for pid, r in self.role.items() if r == role]
            return round(max(values) / _KIB) if values else None

        return {
            "peak_rss_sum_mib": round(self.peak_sum_kib / _KIB),
            "peak_rss_python_driver_mib": largest(PYTHON_DRIVER, self.peak_kib),
            "hwm_python_driver_mib": largest(PYTHON_DRIVER, self.hwm_kib),
            "peak_rss_jvm_mib": largest(JVM, self.peak_kib),
            "hwm_jvm_mib": largest(JVM, self.hwm_kib),
            "processes": [
                {
                    "role": self.role[pid],
                    "peak_rss_mib": round(peak / _KIB),
                    "hwm_mib": round(self.hwm_kib[pid] / _KIB),
                }
                for pid, peak in sorted(self.peak_kib.items(), key=lambda item: -item[1])
            ],
        }


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from every process's parent in /proc/<pid>/stat (this
    kernel has no /proc/<pid>/task/<tid>/children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def _status(pid: int) -> dict[str, str] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _kib(value: str) -> int:
    return int(value.split()[0])  # "123456 kB"


def _timed(function, *args) -> float:
    started = time.monotonic()
    function(*args)
    return time.monotonic() - started


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(
        "records/s count both topics. One run on a 2-core machine, where the brokers, Spark and "
        "the baseline share the cores with whatever else runs (load average "
        f"{n['load_average_before_baseline']:.1f} before the baseline, "
        f"{n['load_average_before_validate']:.1f} before validate): the ratio is noisy, compare "
        "it within one run; with few records Spark's fixed start-up dominates it."
    )


if __name__ == "__main__":
    main()
