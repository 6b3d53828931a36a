"""Each role's resident memory under steady load: what k8s/'s requests and limits rest on.

Starts two local Kafka clusters (localkafka), a --partitions source topic, and `exactly run`
(the replicator, the deduplicator and offset sync as its children, each serving its own
/metrics); produces --rate records/s of --value-bytes for --seconds, every value different
(bench/payloads.py's JSON mix: about as compressible as real payloads);
samples every role's process_resident_memory_bytes every 2 s. Prints, per process, the peak and
the median of the second half (steady state), and the records/s stage 2 wrote meanwhile.

    make bench-memory          # python -m bench.role_memory; --help for other loads
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from bench.payloads import Payloads
from localkafka import LocalCluster, free_port_block, start_all
from runtime import produce_when_room
from runtime.settings import role_environment

PROCESSES = {"exactly run": 0, "replicator": 1, "deduplicator": 2, "offsetsync": 3}


def _metrics(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def _produce(bootstrap: str, topic: str, rate: float, value_bytes: int, stop: threading.Event):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    payloads = Payloads(value_bytes)  # a different value for every record
    sent, started, n = 0, time.monotonic(), 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            produce_when_room(producer, topic, key=b"k%d" % n, value=payloads.value(n))
            sent += 1
            n += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)


def _sample(port: int, seconds: float) -> tuple[dict[str, list[float]], list[tuple[float, float]]]:
    """Every 2 s for ``seconds``: each process's resident bytes, and stage 2's records written."""
    samples: dict[str, list[float]] = {name: [] for name in PROCESSES}
    written: list[tuple[float, float]] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        time.sleep(2)
        for name, offset in PROCESSES.items():
            rss = _metrics(port + offset).get("process_resident_memory_bytes")
            if rss is not None:
                samples[name].append(rss)
        records = _metrics(port + 2).get("exactly_deduplicator_records_written_total")
        if records is not None:
            written.append((time.monotonic(), records))
    return samples, written


def _report(
    args: argparse.Namespace,
    samples: dict[str, list[float]],
    written: list[tuple[float, float]],
) -> None:
    print(
        f"load: {args.rate:.0f} records/s of {args.value_bytes} B (JSON events, every value "
        f"different) into {args.partitions} partitions for {args.seconds:.0f} s"
    )
    half = len(written) // 2
    if len(written) > half + 1:
        (t0, r0), (t1, r1) = written[half], written[-1]
        print(f"stage 2 wrote {(r1 - r0) / (t1 - t0):.0f} records/s over the second half")
    print(f"{'process':<14} {'peak RSS MiB':>13} {'steady RSS MiB':>15}  samples")
    for name, values in samples.items():
        if not values:
            print(f"{name:<14} {'-':>13} {'-':>15}  0")
            continue
        steady = statistics.median(values[len(values) // 2 :])
        print(f"{name:<14} {max(values) / 2**20:>13.0f} {steady / 2**20:>15.0f}  {len(values)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=5000, help="records/s (default 5000)")
    parser.add_argument("--seconds", type=float, default=90, help="load duration (default 90)")
    parser.add_argument("--value-bytes", type=int, default=1024, help="value size (default 1024)")
    parser.add_argument("--partitions", type=int, default=12, help="source partitions (12)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
        base = Path(scratch)
        clusters = [LocalCluster.create(base / name, name) for name in ("source", "target")]
        start_all(clusters, tie_to_parent=True)
        source, target = clusters
        run = None
        try:
            topic = f"memory.{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": source.bootstrap_servers})
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
            port = free_port_block(len(PROCESSES))
            env = role_environment(
                {
                    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
                    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
                    "REPLICATION_TOPICS_INCLUDE": topic,
                    "REPLICATION_FLOW": "memory",
                    "REPLICATION_INSTANCE_ID": "bench",
                    "OFFSETSYNC_GROUPS_INCLUDE": "memory-app",
                    "METRICS_PORT": str(port),
                    "STATE_DIR": str(base / "state"),
                }
            )
            log = (base / "run.log").open("wb")
            run = subprocess.Popen(
                [sys.executable, "-m", "exactly", "run"], env=env, stdout=log, stderr=log
            )
            stop = threading.Event()
            producer = threading.Thread(
                target=_produce,
                args=(source.bootstrap_servers, topic, args.rate, args.value_bytes, stop),
                daemon=True,
            )
            producer.start()
            samples, written = _sample(port, args.seconds)
            stop.set()
            producer.join(60)
        finally:
            if run is not None:
                run.send_signal(signal.SIGTERM)
                run.wait(120)
            for cluster in clusters:
                cluster.stop()

    _report(args, samples, written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
