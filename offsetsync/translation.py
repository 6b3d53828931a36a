"""What offset translation (offsetsync/translate.py) is asked, and its four answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Request:
    source_topic: str
    destination_topic: str
    partition: int
    committed: int


@dataclass(frozen=True, slots=True)
class Translated:
    destination_offset: int
    # True: located by the provenance header; False: by timestamp alone (may re-read records
    # of the same millisecond, never skips one).
    exact: bool


@dataclass(frozen=True, slots=True)
class Waiting:
    """Replication has not yet committed the copy of this source record."""

    source_offset: int


@dataclass(frozen=True, slots=True)
class BehindRetention:
    """The committed offset is below the source's log start: the records the group would read
    next are gone from the source, so there is nothing exact to translate."""

    log_start: int


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The source or destination partition could not be read this time (no leader, or a
    retriable error of its own): nothing is known of it, so nothing is decided on it; the next
    cycle asks again."""

    cluster: str  # "source" or "target"
    topic: str
    partition: int
    reason: str
    # The answer says the client's idea of the partition's leader is out of date.
    stale: bool = False


Translation = Translated | Waiting | BehindRetention | Unavailable
