"""What stage 2's open transaction holds (the states it changed, the staging offsets it consumed,
its size, its records' times, the topics it wrote), and the changelog records of its states,
produced into it (step 1 of the loop's commit, invariant 5)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

from confluent_kafka import KafkaError, Message, Producer

from deduplicator.layout import ChangelogLayout
from deduplicator.rule import PartitionState, encode_state
from runtime import Settings, produce_when_room


@dataclass
class Tally:
    """What one transaction wrote and dropped, for the counters once it commits: the envelopes
    of an aborted one are judged, and their records written, again after the rewind."""

    written: dict[str, int] = field(default_factory=dict)  # destination topic -> records
    duplicates: int = 0
    stale: int = 0
    orphans: int = 0
    dead_letters: int = 0
    restamped: int = 0  # records stamped 0, written with the time of writing (output.write)


class OpenTransaction:
    def __init__(self) -> None:
        # Source partition state key -> (staging partition, its state after this transaction).
        self.pending: dict[bytes, tuple[int, PartitionState]] = {}
        self.offsets: dict[int, int] = {}  # staging partition -> next offset to read
        self.open = False
        self.commit_sent = False  # commit_transaction called: its outcome may be a commit
        self.began = 0.0
        self.produced = 0
        self.bytes = 0
        self.timestamps: list[int] = []
        # Destination partition -> the staging partitions whose envelopes wrote to it: the ones
        # to stop when a broker refuses that partition's records for good (stops.refused).
        self.routes: dict[tuple[str, int], set[int]] = {}
        self.dead_lettered: set[int] = set()  # staging partitions whose records it dead-letters
        self.tally = Tally()

    @property
    def written(self) -> set[str]:
        """The destination topics it wrote to: named if a write is refused."""
        return {topic for topic, _partition in self.routes}

    def due(self, settings: Settings) -> bool:
        """Whether the open transaction reached one of the commit limits."""
        return self.open and (
            time.monotonic() - self.began >= settings.commit_interval_ms / 1000
            or self.produced >= settings.commit_max_records
            or self.bytes >= settings.commit_max_bytes
        )

    def floor_left(self, settings: Settings) -> float:
        """Seconds until the open transaction may commit with staging run dry
        (REPLICATION_COMMIT_MIN_INTERVAL_MS); 0 or less: now."""
        return self.began + settings.commit_min_interval_ms / 1000 - time.monotonic()

    def reset(self) -> None:
        self.pending.clear()
        self.offsets.clear()
        self.timestamps.clear()
        self.routes.clear()
        self.dead_lettered.clear()
        self.tally = Tally()
        self.open = False
        self.commit_sent = False
        self.produced = 0
        self.bytes = 0

    def by_partition(self) -> dict[int, dict[bytes, PartitionState]]:
        """The states this transaction changed, by staging partition (one write batch each)."""
        by_partition: dict[int, dict[bytes, PartitionState]] = {}
        for key, (partition, state) in self.pending.items():
            by_partition.setdefault(partition, {})[key] = state
        return by_partition


class ChangelogWrites:
    """The changelog records of an open transaction's states, produced into it: by staging
    partition, the offset of its last record once acknowledged (``offsets``: what its store
    reflects after the commit), and every delivery error (``failures``)."""

    def __init__(
        self, producer: Producer, layout: ChangelogLayout, transaction: OpenTransaction
    ) -> None:
        self.offsets: dict[int, int] = {}
        self.failures: list[KafkaError] = []
        for key, (lane, state) in transaction.pending.items():
            produce_when_room(
                producer,
                layout.topic,
                key=key,
                value=encode_state(state),
                partition=layout.partition_of(lane),
                headers=layout.headers(lane),
                # By the staging partition, not the changelog's: in a shared changelog each
                # store reflects its own records' offsets, the only ones its restore reads.
                on_delivery=partial(self._delivered, lane),
            )

    def _delivered(self, lane: int, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failures.append(error)
            return
        self.offsets[lane] = max(self.offsets.get(lane, -1), message.offset())
