"""The dedup rule (invariant 4), pure: which records of an envelope stage 2 writes.

A record is accepted iff its offset is above `high`, the highest offset accepted so far for its
source partition, AND the envelope's `prev_offset` is empty or at most `high`. An envelope that
fails the second test is an orphan of a stage-1 gap: nothing of it is written, and stage 1's
next session sends it again in order. Records at or below `high` are duplicates (stage 1 is
at-least-once) and are dropped.

A source topic deleted and recreated under its name has a new topic id and starts at offset 0
again: its first envelope retires the old id and starts from `high = -1`; envelopes that still
carry a retired id (late writes of an old stage-1 producer) are stale and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from envelope import EnvelopeRows, RecordRow

NOTHING_ACCEPTED = -1
_STATE_VERSION = 1
# Retired topic ids kept per partition: a recreated topic is rare; a bound keeps state small.
MAX_RETIRED_IDS = 8


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What stage 2 knows of one source partition; the changelog holds it, RocksDB caches it."""

    topic_id: bytes
    high: int = NOTHING_ACCEPTED
    retired: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: tuple[RecordRow, ...]  # wire rows: (offset, timestamp, type, key, value, headers)
    duplicates: int
    orphan: bool
    stale: bool
    state: PartitionState


def judge(state: PartitionState | None, envelope: EnvelopeRows) -> Verdict:
    """Apply invariant 4 to one envelope; `state` is None for a source partition never seen."""
    if state is None:
        state = PartitionState(envelope.topic_id)
    elif envelope.topic_id != state.topic_id:
        if envelope.topic_id in state.retired:
            return Verdict((), len(envelope.rows), orphan=False, stale=True, state=state)
        retired = (state.topic_id, *state.retired)[:MAX_RETIRED_IDS]
        state = PartitionState(envelope.topic_id, NOTHING_ACCEPTED, retired)
    high = state.high
    if envelope.prev_offset is not None and envelope.prev_offset > high:
        return Verdict((), 0, orphan=True, stale=False, state=state)
    rows = envelope.rows
    if rows[-1][0] <= high:  # [0]: a row's offset
        return Verdict((), len(rows), orphan=False, stale=False, state=state)
    # Offsets strictly increase within an envelope (the codec checks it): skip the prefix.
    first_new = 0
    while rows[first_new][0] <= high:
        first_new += 1
    accepted = rows[first_new:] if first_new else rows
    new_state = PartitionState(state.topic_id, accepted[-1][0], state.retired)
    return Verdict(accepted, first_new, orphan=False, stale=False, state=new_state)


def state_key(source_cluster_id: str, topic: str, partition: int) -> bytes:
    """The key of a source partition's state, in the changelog and in RocksDB."""
    return f"{source_cluster_id}\0{topic}\0{partition}".encode()


def encode_state(state: PartitionState) -> bytes:
    packed: bytes = msgpack.packb(
        (_STATE_VERSION, state.topic_id, state.high, list(state.retired)), use_bin_type=True
    )
    return packed


def decode_state(data: bytes) -> PartitionState:
    version, topic_id, high, retired = msgpack.unpackb(data, raw=False)
    if version != _STATE_VERSION:
        raise ValueError(f"dedup state version {version} (this build reads {_STATE_VERSION})")
    return PartitionState(topic_id, high, tuple(retired))
