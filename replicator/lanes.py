"""Which staging partition carries a source partition, and what stage 1 may commit for it.

Invariant 1 (one lane per source partition): `lane_of` is a pure function of the source topic,
the partition and the staging partition count recorded when the staging topic was created.
Invariant 3 (commit only what is acknowledged): `Lane.committable` only moves over a prefix of
envelopes that are all acknowledged.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

LANE_FUNCTION = "crc32(topic NUL partition) mod partitions, v1"


def lane_of(topic: str, partition: int, staging_partitions: int) -> int:
    return zlib.crc32(f"{topic}\0{partition}".encode()) % staging_partitions


@dataclass(slots=True)
class InFlight:
    last_offset: int
    produced_at: float
    acked: bool = False


@dataclass(slots=True)
class Lane:
    """One assigned source partition within the current stage-1 session."""

    topic: str
    partition: int
    staging_partition: int
    topic_id: bytes
    # The next source offset to commit: every record below it is acknowledged in staging.
    committable: int
    committed: int
    # The offset of the last record this session emitted for the partition; None starts a
    # session, which tells stage 2 that nothing is chained before the next envelope.
    prev_offset: int | None = None
    in_flight: deque[InFlight] = field(default_factory=deque)
    stopped: str | None = None

    def sent(self, last_offset: int, now: float) -> InFlight:
        flight = InFlight(last_offset, now)
        self.in_flight.append(flight)
        self.prev_offset = last_offset
        return flight

    def acknowledged(self, flight: InFlight) -> None:
        flight.acked = True
        # Acks of one staging partition arrive in order, but be strict anyway: only a fully
        # acknowledged prefix moves the commit point.
        while self.in_flight and self.in_flight[0].acked:
            self.committable = max(self.committable, self.in_flight.popleft().last_offset + 1)

    def oldest_unacked_at(self) -> float | None:
        return self.in_flight[0].produced_at if self.in_flight else None

    def new_session(self) -> None:
        self.prev_offset = None
        self.in_flight.clear()
