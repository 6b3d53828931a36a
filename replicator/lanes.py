"""Which staging partition carries a source partition, and what stage 1 may commit for it.

Invariant 1 (one lane per source partition): `lane_of` is a pure function of the source topic,
the partition and the staging partition count recorded when the staging topic was created.
Invariant 3 (commit only what is acknowledged): `Lane.committable` only moves over a prefix of
envelopes that are all acknowledged, and over records not copied (loop prevention) only once
everything before them is.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

LANE_FUNCTION = "crc32(topic NUL partition) mod partitions, v1"
# Every source offset stage 1 commits carries the id of the topic its lane read, so that an
# offset committed by a lane of a topic since deleted and recreated under its name is told from
# one of the topic now there (invariant 7; replicator.assignment reads it back).
_COMMIT_METADATA_PREFIX = "exactly.topic_id "


def lane_of(topic: str, partition: int, staging_partitions: int) -> int:
    return zlib.crc32(f"{topic}\0{partition}".encode()) % staging_partitions


def commit_metadata(topic_id: bytes) -> str:
    """The metadata of a committed source offset: the id of the topic the lane read."""
    return f"{_COMMIT_METADATA_PREFIX}{topic_id.hex()}"


def committed_topic_id(metadata: str | None) -> str | None:
    """The topic id (hex) a committed offset's metadata names; None for an offset committed
    without it (by a stage 1 before this mark, or by hand)."""
    if metadata and metadata.startswith(_COMMIT_METADATA_PREFIX):
        return metadata.removeprefix(_COMMIT_METADATA_PREFIX)
    return None


@dataclass(slots=True)
class InFlight:
    # The last source offset this entry covers: an envelope's last record's, or that of a later
    # record passed over after it (a copy already: loop prevention); an entry of passed-over
    # records alone is born acknowledged (Lane.passed_over).
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
    passed_over_logged: bool = False
    refetch_warned_at: float = float("-inf")  # replicator.consume_errors: a refused fetch's warning

    def sent(self, last_record: int, covers: int, now: float) -> InFlight:
        """An envelope whose last record is at ``last_record``, covering the source offsets up
        to ``covers`` (records after ``last_record`` were not copied)."""
        flight = InFlight(covers, now)
        self.in_flight.append(flight)
        # The chain names the last record emitted, never one left out: stage 2 accepts the next
        # envelope only if its prev_offset is at most what it has accepted (invariant 4).
        self.prev_offset = last_record
        return flight

    def passed_over(self, covers: int, now: float) -> None:
        """Records up to ``covers`` were read and none of them copied: they may be committed
        once every envelope before them is acknowledged, never before (invariant 3)."""
        if not self.in_flight:
            self.committable = max(self.committable, covers + 1)
        elif self.in_flight[-1].acked:
            self.in_flight[-1].last_offset = covers
        else:
            self.in_flight.append(InFlight(covers, now, acked=True))

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
