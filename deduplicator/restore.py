"""Reading a staging partition's changelog tail back into RocksDB (docs/design.md §3: the changelog
is the truth, RocksDB a cache of a prefix of it)."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from deduplicator.errors import RestoreTimeoutError
from deduplicator.layout import lane_of
from runtime import (
    LIBRDKAFKA_LOG,
    ErrorClass,
    Settings,
    call_retrying,
    classify,
    get_logger,
    kafka_error_of,
)
from runtime.topics import call_once_known

# The loop's logger, as for the other lines of an assignment (partitions.py).
log = get_logger("deduplicator.loop")

_POLL_S = 0.05
_BATCH = 1000
_WATERMARK_TIMEOUT_S = 30.0
# One ask for stable offsets (await_stable_offsets), asked again within the restore deadline.
_STABLE_ASK_S = 5.0


@dataclass(frozen=True, slots=True)
class ChangelogReader:
    """What a restore reads with: ``consumer`` reads the changelog read_committed; ``watcher``
    (read_uncommitted, never assigned) sees the log's end with open transactions included."""

    consumer: Consumer
    watcher: Consumer


@contextmanager
def changelog_reader(settings: Settings) -> Iterator[ChangelogReader]:
    """One reader for every partition an assignment restores (a consumer per partition
    costs a connection set-up each)."""
    base = {
        **settings.destination.client_config(),
        "group.id": settings.names.changelog_reader_group,
        "enable.auto.commit": False,
        "logger": LIBRDKAFKA_LOG,
    }
    consumer = Consumer(
        {
            **base,
            # Invariant 5: only committed state; an aborted transaction's changelog never was.
            "isolation.level": "read_committed",
            # A tail that is only a transaction marker returns no record: answer at once instead
            # of the broker's default 500 ms wait, per partition, inside on_assign.
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        watcher = Consumer({**base, "isolation.level": "read_uncommitted"})
    except BaseException:
        consumer.close()
        raise
    try:
        yield ChangelogReader(consumer, watcher)
    finally:
        watcher.close()
        consumer.close()


def await_stable_offsets(
    consumer: Consumer, partitions: list[TopicPartition], deadline: float
) -> list[TopicPartition]:
    """The group's committed offsets of ``partitions`` (below 0: never committed), once they
    are stable: no transaction
    holds offsets of them that it has sent but not yet committed or aborted. RestoreTimeoutError
    once `time.monotonic()` passes `deadline`.

    Asked before the changelog is read, for the case ``changelog_tail`` cannot see. A previous
    owner sends its staging offsets into its transaction (step 2 of the loop's commit) before
    its flush has put that transaction's changelog records in the log (step 3). Frozen between
    the two, it holds offsets the log shows nothing of: a restore read then ends with the state
    from before that transaction, and if the owner wakes and commits, the offsets this owner's
    consumer starts from are past the state it restored (envelopes taken for orphans, or sent
    again, copied twice). The broker answers a read_committed consumer's offset fetch only
    once such offsets are stable (KIP-447); after that, a transaction of the previous owner is
    either over or can no longer add the offsets (invariant 6), and the restore sees what it
    wrote."""
    said = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RestoreTimeoutError(
                "the committed offsets of staging partitions "
                f"{sorted(tp.partition for tp in partitions)} were not stable by the restore "
                "deadline (a previous owner's transaction holding offsets it has not ended, or "
                "a group coordinator not answering); a restart tries again"
            )
        try:
            found: list[TopicPartition] = consumer.committed(
                partitions, timeout=min(remaining, _STABLE_ASK_S)
            )
            errors = [tp.error for tp in found if tp.error is not None]
        except KafkaException as exc:
            errors = [kafka_error_of(exc)]
        if not errors:
            return found
        error = errors[0]
        # The wait itself: librdkafka asks again while the broker answers UNSTABLE_OFFSET_COMMIT
        # and times the call out (_TIMED_OUT); both are retriable. Credentials, ACLs and the
        # like are not waited on.
        if classify(error) is not ErrorClass.RETRIABLE:
            raise KafkaException(error)
        if not said:
            said = True
            log.info(
                "staging offsets not stable yet (a previous owner's transaction holds offsets "
                "it has not ended, or the group coordinator is moving): the restore waits",
                partitions=sorted(tp.partition for tp in partitions),
                error=error.str(),
            )
        time.sleep(_POLL_S)


def changelog_tail(
    reader: ChangelogReader, topic: str, partition: int, start: int, deadline: float
) -> Generator[tuple[bytes, bytes | None, int]]:
    """(key, value, offset) of the readable changelog records from `start` to the end of the
    log, once every transaction in it has ended; RestoreTimeoutError once `time.monotonic()`
    passes `deadline`. For a co-partitioned changelog, whose partition holds one staging
    partition's state.

    The end is the log's, open transactions included, not the last stable offset. A previous
    owner frozen with its transaction open (a zombie: its offsets already sent, its commit not
    yet) may still commit it when it wakes; the staging offsets its commit moves are the ones
    this owner's consumer starts from. Restoring only to the stable offset would pair those
    offsets with the state before that transaction, and every envelope after it would look like
    an orphan and be skipped for good (records lost; found by exactly chaos). So the restore
    waits until the transaction commits or aborts (the broker aborts it after the transaction
    timeout, inside RESTORE_DEADLINE_S), reading what it committed, and ends only when the log
    holds no open transaction and everything up to its end is read.
    """
    tail = _tail(reader, TopicPartition(topic, partition), start, deadline, pinned=None)
    with closing(tail):  # unassigns the reader when the caller stops early
        for message in tail:
            yield message.key(), message.value(), message.offset()


def shared_changelog_tail(
    reader: ChangelogReader, topic: str, offsets: tuple[int, int], deadline: float
) -> Generator[tuple[int, bytes, bytes | None, int]]:
    """(staging partition, key, value, offset) of the readable records of a shared changelog's
    one partition from ``start`` to ``end`` (``offsets``, deduplicator/layout.py), once every
    transaction reaching below ``end`` has ended; RestoreTimeoutError once `time.monotonic()`
    passes `deadline`. Call it only after ``await_stable_offsets``, with the log's end
    (``changelog_end``) asked after it.

    Not the end as it moves: other instances of the flow write the partition all the
    time, and a restore that waited for a moment with no transaction open would wait for ever.
    Nothing this owner needs lies past that first end. Every transaction that can commit
    offsets of its staging partitions had its offsets stable before this call
    (``await_stable_offsets``), so it has ended, and had flushed its changelog records before
    committing: they are below the end, and the wait for the stable offset covers their
    commit markers, which the coordinator may write after the offsets' marker. A later
    transaction holding its partitions' records is a zombie's: its offsets are refused (a
    stale generation, invariant 6) and it aborts.
    """
    start, end = offsets
    tail = _tail(reader, TopicPartition(topic, 0), start, deadline, pinned=end)
    with closing(tail):
        for message in tail:
            yield lane_of(message), message.key(), message.value(), message.offset()


def _tail(
    reader: ChangelogReader, tp: TopicPartition, start: int, deadline: float, *, pinned: int | None
) -> Generator[Message]:
    """The readable records of ``tp`` from ``start`` to the ``pinned`` end, or (None) to the
    log's end as it stands at each look, once no open transaction reaches below it."""
    assigned = False
    try:
        while True:
            stable, end = _ends(reader, tp)
            end = end if pinned is None else pinned
            position = reader.consumer.position([tp])[0].offset if assigned else start
            position = max(position, start)  # no position before the first fetch
            if position >= end and stable >= end:
                return
            if position >= end:  # all read, but a transaction at the end is still open
                _fail_past(deadline, tp, position, end, stable)
                time.sleep(_POLL_S)
                continue
            if not assigned:
                reader.consumer.assign([TopicPartition(tp.topic, tp.partition, start)])
                assigned = True
            yield from _read_to(reader.consumer, tp, (start, end), stable, deadline)
    finally:
        if assigned:
            reader.consumer.unassign()


def changelog_end(reader: ChangelogReader, topic: str, partition: int) -> int:
    """The log end offset of a changelog partition (open transactions included)."""
    return _ends(reader, TopicPartition(topic, partition))[1]


def _ends(reader: ChangelogReader, tp: TopicPartition) -> tuple[int, int]:
    """(last stable offset, log end offset) of the changelog partition."""

    def ends() -> tuple[int, int]:
        _low, stable = reader.consumer.get_watermark_offsets(
            tp, timeout=_WATERMARK_TIMEOUT_S, cached=False
        )
        _low, end = reader.watcher.get_watermark_offsets(
            tp, timeout=_WATERMARK_TIMEOUT_S, cached=False
        )
        return int(stable), int(end)

    # A leader still being elected (a new changelog, a broker just restarted) is retriable; a
    # changelog just created may be unknown yet to the broker asked (runtime.topics: on a fresh
    # three-node target stage 2 stopped at start-up on "Unknown topic or partition").
    return call_retrying(lambda: call_once_known(ends, tp.topic), deadline_s=_WATERMARK_TIMEOUT_S)


def _read_to(
    consumer: Consumer,
    tp: TopicPartition,
    offsets: tuple[int, int],
    stable: int,
    deadline: float,
) -> Iterator[Message]:
    """Yield the readable records of ``tp`` below ``end`` until its position reaches ``end``;
    ``start`` is where the restore began (the position before the first fetch)."""
    start, end = offsets
    while True:
        # Position, not the last offset read: read_committed skips markers and aborted
        # records (the position passes them on the next consume), so the last readable
        # record may lie below `end`.
        position = consumer.position([tp])[0].offset
        if position >= end:
            return
        _fail_past(deadline, tp, max(position, start), end, stable)
        for message in consumer.consume(_BATCH, _POLL_S):
            if message.error():
                raise KafkaException(message.error())
            if message.offset() < end:
                yield message


def _fail_past(deadline: float, tp: TopicPartition, reached: int, end: int, stable: int) -> None:
    """RestoreTimeoutError once the deadline has passed, saying where the restore stood."""
    if time.monotonic() <= deadline:
        return
    waiting = (
        f"; a transaction open since offset {stable} has not ended (a previous owner's, or "
        "in a shared changelog another instance's)"
        if stable < end
        else ""
    )
    raise RestoreTimeoutError(
        f"restore of changelog partition {tp.partition} stopped at offset {reached} "
        f"of {end} at its deadline{waiting}; a restart resumes from there"
    )
