"""Envelope codec throughput against plain msgpack, in records per second.

    python -m bench.envelope_codec

For envelopes of 500 records (16-byte keys, two headers) with 100 B and 1 KiB values, it times
encode() and decode() and, as the baseline, msgpack.packb/unpackb of the same nested lists
without our value objects and validation. Each figure is the median of several repetitions.
"""

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgpack

RECORDS = 500
REPETITIONS = 15
MIN_SECONDS = 0.05  # per repetition: enough iterations that the timer's resolution is noise


def main() -> None:
    print(f"envelope of {RECORDS} records, 16 B keys, 2 headers; median of {REPETITIONS} runs")
    print(
        f"{'value':>6}  {'op':<6}  {'ours rec/s':>12}  {'msgpack rec/s':>13}  {'ours/msgpack':>12}"
    )
    for value_size, label in ((100, "100 B"), (1024, "1 KiB")):
        for op, ours, baseline in contenders(value_size):
            ours_rate, base_rate = records_per_second(ours), records_per_second(baseline)
            print(
                f"{label:>6}  {op:<6}  {ours_rate:>12,.0f}  {base_rate:>13,.0f}"
                f"  {ours_rate / base_rate:>12.2f}"
            )


def contenders(value_size: int) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(operation, ours, plain msgpack on the same nested lists) for one value size."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
    from envelope import Envelope, SourceRecord, decode, encode

    records = tuple(
        SourceRecord(
            offset=1_000_000 + i,
            timestamp=1_700_000_000_000 + i,
            timestamp_type=1,
            key=os.urandom(16),
            value=os.urandom(value_size),
            headers=(("trace-id", os.urandom(16)), ("origin", b"eu-west")),
        )
        for i in range(RECORDS)
    )
    envelope = Envelope("lkc-Zx9_3fQ2S0a4gH1bTn6wYA", "orders", os.urandom(16), 7, None, records)
    lists = [
        1,
        envelope.source_cluster_id,
        envelope.topic,
        envelope.topic_id,
        envelope.partition,
        envelope.prev_offset,
        [
            [r.offset, r.timestamp, r.timestamp_type, r.key, r.value, [list(h) for h in r.headers]]
            for r in records
        ],
    ]
    data = encode(envelope)
    assert data == msgpack.packb(lists, use_bin_type=True), "baseline packs different bytes"
    assert decode(data) == envelope
    return [
        ("encode", lambda: encode(envelope), lambda: msgpack.packb(lists, use_bin_type=True)),
        ("decode", lambda: decode(data), lambda: msgpack.unpackb(data)),
    ]


def records_per_second(call: Callable[[], object]) -> float:
    iterations = 1
    while timed(call, iterations) < MIN_SECONDS:
        iterations *= 2
    seconds = statistics.median(timed(call, iterations) for _ in range(REPETITIONS))
    return RECORDS * iterations / seconds


def timed(call: Callable[[], object], iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
