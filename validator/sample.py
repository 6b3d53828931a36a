"""Whether a destination topic carries the provenance header, decided before Spark reads it.

`--match auto` pairs a topic by the header when its records carry it. Looking at the first
record in range of every destination partition (a few hundred records at most, read here on
the driver) spares the audit a pass over the whole destination; a record without the header
further on is not guessed at but reported (unexpected, "no exactly.origin header"; with
--two-way it is a local record, and the header is always used).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from envelope.provenance import find_provenance
from runtime.settings import Settings
from validator.errors import InputError
from validator.snapshot import Snapshot

_TIMEOUT_S = 30.0


def first_records_with_origin(settings: Settings, snapshot: Snapshot) -> dict[str, tuple[int, int]]:
    """Per source topic: (first records looked at, how many carry a well-formed header)."""
    wanted = {
        TopicPartition(pair.destination_topic, p, r.start): pair.source_topic
        for pair in snapshot.pairs
        for p, r in pair.destination.items()
        if r.size
    }
    ends = {
        (pair.destination_topic, p): r.end
        for pair in snapshot.pairs
        for p, r in pair.destination.items()
    }
    seen: dict[tuple[str, int], bool] = {}
    if wanted:
        seen = _first_records(settings, wanted, ends)
    counts = {pair.source_topic: (0, 0) for pair in snapshot.pairs}
    for tp, source_topic in wanted.items():
        if (tp.topic, tp.partition) in seen:
            looked, carrying = counts[source_topic]
            counts[source_topic] = (looked + 1, carrying + seen[(tp.topic, tp.partition)])
    return counts


def destination_reader(settings: Settings, config: Mapping[str, object]) -> Consumer:
    """A consumer of the destination that only assigns and never commits, under the group the
    validator is granted (runtime/grants.py); its failures are the caller's InputError, once."""
    return Consumer(
        {
            **settings.destination.client_config(),
            "group.id": "exactly-validate-sample",
            "enable.auto.commit": False,
            "log_level": "0",
            **config,
        }
    )


def _first_records(
    settings: Settings,
    wanted: Mapping[TopicPartition, str],
    ends: Mapping[tuple[str, int], int],
) -> dict[tuple[str, int], bool]:
    consumer = destination_reader(settings, {"isolation.level": "read_committed"})
    try:
        consumer.assign(list(wanted))
        seen: dict[tuple[str, int], bool] = {}
        pending = {(tp.topic, tp.partition) for tp in wanted}
        deadline = time.monotonic() + _TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                if message.error():
                    continue  # partition EOF and the like: the position check below decides
                key = (message.topic(), message.partition())
                if key in pending and message.offset() < ends[key]:
                    seen[key] = find_provenance(message.headers()) is not None
                pending.discard(key)
            # A range of aborted records and markers only has no first record: nothing to see.
            done = [
                key
                for key in pending
                if consumer.position([TopicPartition(*key)])[0].offset >= ends[key]
            ]
            pending.difference_update(done)
        if pending:
            raise InputError(
                f"could not read the first record of {len(pending)} destination partition(s) "
                f"within {_TIMEOUT_S:g} s (e.g. {sorted(pending)[0]})"
            )
        return seen
    except KafkaException as exc:
        raise InputError(f"cannot read the destination cluster: {exc}") from None
    finally:
        consumer.close()
