"""Stage 1's per-record work on the client, beside a plain loop's produce() of every record.

    python -m bench.replicator_hot_path

No broker: records are confluent_kafka.Message objects built in memory. Measures the CPU of
turning records into envelope rows and packing envelopes of 500 (replicator.batching +
envelope.encode_rows), against calling Producer.produce() once per record with key, value,
headers and timestamp (queued only; the producer never connects). Reports microseconds per
record and the ratio, from one process, so that the two share the machine's state.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Message, Producer

from bench.payloads import Payloads
from envelope import RecordRow, encode_rows
from replicator.batching import cut_runs, row_of

RECORDS = 200_000
ENVELOPE_RECORDS = 500
_QUIET = logging.getLogger("bench.quiet")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def main() -> None:
    print(f"{RECORDS} records, 16 B header, envelopes of {ENVELOPE_RECORDS}; CPU us per record")
    print(f"{'value':>6} {'stage 1 rows+encode':>20} {'produce() per record':>21} {'ratio':>6}")
    for size in (100, 1024):
        messages = _messages(size)
        stage1 = _stage1(messages)
        plain = _plain(messages)
        print(f"{size:>5}B {stage1:>20.2f} {plain:>21.2f} {stage1 / plain:>6.2f}")


def _messages(size: int) -> list[Message]:
    payloads = Payloads(size)
    return [
        Message(
            topic="t",
            partition=0,
            offset=i,
            key=b"k%d" % i,
            value=payloads.value(i),
            headers=[("trace", b"0123456789abcdef")],
            timestamp=(1, 1_700_000_000_000 + i),
        )
        for i in range(RECORDS)
    ]


def _stage1(messages: list[Message]) -> float:
    """Stage 1's own path (Replicator._rows, batching.cut_runs), without the broker."""
    started = time.process_time()
    for _key, run in cut_runs(_rows(messages), ENVELOPE_RECORDS, budget=1 << 40):
        encode_rows("cluster", "t", bytes(16), 0, None, tuple(run.rows))
    return (time.process_time() - started) / len(messages) * 1e6


def _rows(messages: list[Message]) -> Iterator[tuple[tuple[str, int], RecordRow, int]]:
    for message in messages:
        row, size = row_of(message)
        yield (message.topic(), message.partition()), row, size


def _plain(messages: list[Message]) -> float:
    producer = Producer(
        {
            "bootstrap.servers": "127.0.0.1:9",
            "queue.buffering.max.messages": 2 * RECORDS,
            "queue.buffering.max.kbytes": 4_000_000,
            "linger.ms": 100_000,  # below message.timeout.ms, as librdkafka requires
            "logger": _QUIET,
        }
    )
    started = time.process_time()
    for m in messages:
        producer.produce(
            "t",
            value=m.value(),
            key=m.key(),
            partition=m.partition(),
            headers=m.headers(),
            timestamp=m.timestamp()[1],
        )
    elapsed = time.process_time() - started
    producer.purge()
    producer.flush(0)
    return elapsed / len(messages) * 1e6


if __name__ == "__main__":
    main()
