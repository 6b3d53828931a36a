"""The staging partitions one stage-2 instance owns: each one's state store, opened and brought up
to date from the changelog on assignment and closed when it goes, and each one's committed
position, which a rewind seeks back to (docs/design.md §3.5, invariant 5)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from confluent_kafka import Consumer, Message, TopicPartition

from deduplicator import stops
from deduplicator.backlog import Backlog
from deduplicator.errors import DeduplicatorError, StateStoreLockedError
from deduplicator.layout import ChangelogLayout
from deduplicator.limits import LOCK_RETRY_S, RESTORE_DEADLINE_S
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.restore import (
    ChangelogReader,
    await_stable_offsets,
    changelog_end,
    changelog_reader,
    changelog_tail,
    shared_changelog_tail,
)
from deduplicator.state import RESTORE_BATCH_SIZE, StateStore
from runtime import Settings, get_logger

# The loop's logger: these lines kept the name they had when the loop owned the partitions.
log = get_logger("deduplicator.loop")

# How far (in changelog records) a store of a shared changelog may lag the last commit before
# its offset alone is written: a restore then reads at most about this much of other
# partitions' records for it, for a RocksDB write per store every this many records.
IDLE_STORE_LAG = 1000


class Partitions:
    """The owned staging partitions' state stores (``stores``, by partition) and positions."""

    def __init__(
        self,
        settings: Settings,
        changelog: ChangelogLayout,
        metrics: DeduplicatorMetrics,
        backlog: Backlog,
    ) -> None:
        self.settings = settings
        self.changelog = changelog
        self.metrics = metrics
        self.backlog = backlog
        self._state_root = Path(settings.state_dir) / settings.flow
        self.stores: dict[int, StateStore] = {}
        # Where each assigned staging partition's committed position is, as this process knows
        # it without asking the group coordinator (rewind): the offset of the first record
        # the consumer returned since the assignment, then each commit's.
        self._positions: dict[int, int] = {}
        # Partitions stopped by policy (deduplicator/stops.py), by reason: paused, never read on.
        self.stopped: dict[int, str] = {}

    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Restore ``partitions``' state; where the consumer starts each: its committed offset,
        or offset 0 if it has none (stops.py: librdkafka never chooses)."""
        deadline = time.monotonic() + RESTORE_DEADLINE_S
        # First the offsets, then the changelog: a previous owner's offsets pending in a
        # transaction whose changelog records are not in the log yet (invariant 5).
        committed = await_stable_offsets(consumer, partitions, deadline)
        with changelog_reader(self.settings) as reader:
            for tp in partitions:
                self._positions.pop(tp.partition, None)  # read again from the group's commit
                if (held := self.stores.pop(tp.partition, None)) is not None:
                    held.close()  # assigned again without a revoke: its lock would be ours
            lanes = [tp.partition for tp in partitions]
            if self.changelog.shared:
                self.stores.update(self._open_shared(reader, lanes, deadline))
            else:
                for lane in lanes:
                    self.stores[lane] = self._open_store(reader, lane, deadline)
        self.metrics.assigned_partitions.set(len(self.stores))
        log.info("staging partitions assigned", partitions=[tp.partition for tp in partitions])
        return [stops.start_of(tp) for tp in committed]

    def release(self, partitions: list[TopicPartition]) -> None:
        self.backlog.forget([tp.partition for tp in partitions])
        stops.forget(self.metrics, self.stopped, [tp.partition for tp in partitions])
        for tp in partitions:
            self._positions.pop(tp.partition, None)
            store = self.stores.pop(tp.partition, None)
            if store is not None:
                store.close()
        self.metrics.assigned_partitions.set(len(self.stores))

    def close(self) -> None:
        """Close every store, on the way out (the gauge is left as it was)."""
        for store in self.stores.values():
            store.close()
        self.stores.clear()

    def note_positions(self, messages: list[Message]) -> None:
        """Keep the first offset the consumer returned of each partition since its assignment:
        its committed position, for rewind. A batch cut short by a rewind leaves records
        returned but never processed, and they must be read again. Only markers or aborted
        records can lie between the committed offset and that first record (read_committed),
        so the two positions read the same."""
        for message in messages:
            partition = message.partition()
            if message.error() is None and partition in self.stores:
                self._positions.setdefault(partition, message.offset())

    def committed(self, offsets: dict[int, int]) -> None:
        """A transaction committed these staging offsets (next offset to read, by partition)."""
        for partition, offset in offsets.items():
            self._positions[partition] = offset
            self.backlog.committed(partition, offset)

    def advance_idle(self, offset: int) -> None:
        """After a commit whose last changelog record is at ``offset``: in a shared changelog,
        each owned store more than IDLE_STORE_LAG behind records that it reflects its
        partition's records up to there. None of them lies in between: this instance alone
        writes its partitions' records (invariant 6), and each of its commits went to their
        stores. Bounds how far back the next restore starts when some partitions see no
        records for long (or never: more lanes than source partitions)."""
        if not self.changelog.shared:
            return
        for store in self.stores.values():
            if offset - _reflected(store) > IDLE_STORE_LAG:
                caught_up(store, offset)

    def rewind(self, consumer: Consumer) -> None:
        """Seek every staging partition the consumer returned records of since its assignment
        back to its committed offset, known here without asking the group coordinator. A
        rewind follows a transaction that did not commit: one aborted before commit_transaction
        was called, or aborted by this producer after it, or held by a hung
        send_offsets_to_transaction, whose transaction the replacement's init_transactions
        aborts (a hung commit exits; an unknown outcome raises in the loop's
        _commit_or_recover). And this instance alone commits its partitions' offsets
        (invariant 6), so the group holds what our last commit left there. Asking it instead
        waited on the coordinator that was moving: a target node in controlled shutdown held
        the offset fetch 27 s (three nodes, rolling restart). A partition the consumer returned
        nothing of has nothing to undo."""
        for partition, offset in self._positions.items():
            consumer.seek(TopicPartition(self.settings.names.staging, partition, offset))
            self.backlog.committed(partition, offset)

    def _prefix_of_the_changelog(
        self, partition: int, store: StateStore, end_of: Callable[[], int], deadline: float
    ) -> StateStore:
        """``store``, or a new empty one in its place when it reflects changelog offsets the
        changelog does not hold (``end_of()``: the end of the changelog partition that holds
        its state, asked only of a store that reflects some).

        The store caches a prefix of the changelog (docs/design.md §3.5). One that reflects a
        record at or past the log's end came from another changelog: this one was deleted and
        made anew (an operator's reset, a rebuilt target) or truncated, while the state
        directory was kept. Trusted, its old states would drop new records as duplicates, and
        its offset would refuse the next commit for good. Not caught: a changelog made anew
        that has since grown past the store's offset (another instance wrote it meanwhile);
        the changelog's topic id kept in the store would tell."""
        reflected = store.changelog_offset()
        if reflected is None:
            return store
        end = end_of()
        if reflected < end:
            return store
        log.warning(
            "the local state reflects changelog records the changelog does not hold (made anew "
            "or truncated while the state directory was kept): discarded, restored from the "
            "changelog's beginning",
            partition=partition,
            state_offset=reflected,
            changelog_end=end,
        )
        store.close()
        StateStore.destroy(store.directory)
        return open_or_recreate(store.directory, deadline)

    def _open_store(self, reader: ChangelogReader, partition: int, deadline: float) -> StateStore:
        """The partition's RocksDB, brought up to date from the changelog (the truth)."""
        store = open_or_recreate(self._state_root / str(partition), deadline)
        try:
            started = time.monotonic()
            store = self._prefix_of_the_changelog(
                partition,
                store,
                lambda: changelog_end(reader, self.changelog.topic, partition),
                deadline,
            )
            reflected = store.changelog_offset()
            start = 0 if reflected is None else reflected + 1
            tail = changelog_tail(reader, self.changelog.topic, partition, start, deadline)
            with closing(tail):  # unassigns the reader also when restore raises mid-way
                restored = store.restore(tail)
        except BaseException:
            store.close()  # released on every path: the next owner of the directory opens it
            raise
        seconds = time.monotonic() - started
        self.metrics.observe_restore(seconds, restored)
        log.info(
            "state restored",
            partition=partition,
            from_offset=start,
            records=restored,
            seconds=round(seconds, 2),
        )
        return store

    def _open_shared(
        self, reader: ChangelogReader, lanes: list[int], deadline: float
    ) -> dict[int, StateStore]:
        """The partitions' RocksDBs, brought up to date from a shared changelog in one read
        from the oldest offset any of them reflects (one read per partition would read the
        others' records once for each). The partition's end is asked once, after the offsets
        are stable (``assign``): every store is checked against it and the read stops there."""
        opened: dict[int, StateStore] = {}
        try:
            end = changelog_end(reader, self.changelog.topic, 0)
            for lane in lanes:
                opened[lane] = open_or_recreate(self._state_root / str(lane), deadline)
                opened[lane] = self._prefix_of_the_changelog(
                    lane, opened[lane], lambda: end, deadline
                )
            reflected = {lane: _reflected(store) for lane, store in opened.items()}
            started = time.monotonic()
            restored = _restore_shared(reader, self.changelog.topic, opened, end, deadline)
        except BaseException:
            for store in opened.values():
                store.close()  # released on every path: the next owner of the directory opens it
            raise
        seconds = time.monotonic() - started
        for lane, count in restored.items():
            self.metrics.observe_restore(seconds, count)
            # The co-partitioned restore's line, field for field (from_offset: of the shared
            # partition; seconds: of the one read).
            log.info(
                "state restored",
                partition=lane,
                from_offset=reflected[lane] + 1,
                records=count,
                seconds=round(seconds, 2),
            )
        return opened


def _restore_shared(
    reader: ChangelogReader,
    topic: str,
    stores: dict[int, StateStore],
    end: int,
    deadline: float,
) -> dict[int, int]:
    """Apply a shared changelog's records below ``end`` to the stores of their staging
    partitions, each from past the offset it reflects; the records applied, by partition.

    Every RESTORE_BATCH_SIZE records read (anyone's), each store gets what it has pending and
    the offset reached, so a restore cut short (its deadline, a kill) resumes near where it
    stopped, also for a partition with no records in what was read; otherwise a read longer
    than the deadline would start over and fail again for ever. A record a read_committed
    reader returns lies below the last stable offset, so every transaction up to it has ended:
    each store then holds all of its partition's records up to there."""
    if not stores:
        return {}
    reflected = {lane: _reflected(store) for lane, store in stores.items()}
    pending: dict[int, list[tuple[bytes, bytes | None, int]]] = {lane: [] for lane in stores}
    restored = dict.fromkeys(stores, 0)

    def apply(through: int) -> None:
        for lane, batch in pending.items():
            if batch:
                restored[lane] += stores[lane].restore(batch)
                batch.clear()
            caught_up(stores[lane], through)

    tail = shared_changelog_tail(reader, topic, (min(reflected.values()) + 1, end), deadline)
    with closing(tail):  # unassigns the reader also when a restore raises mid-way
        for read, (lane, key, value, offset) in enumerate(tail, start=1):
            # Another instance's partition, or a record this store reflects already.
            if lane in stores and offset > reflected[lane]:
                pending[lane].append((key, value, offset))
            if read % RESTORE_BATCH_SIZE == 0:
                apply(offset)
    # Every record below the end is read or aborted: each store now reflects its partition's
    # records up to there, whether it had one or not (a partition with no records would
    # otherwise pull every later restore back to the partition's beginning).
    apply(end - 1)
    return restored


def caught_up(store: StateStore, offset: int) -> None:
    """Record that ``store`` reflects its partition's records of a shared changelog up to
    ``offset``, when it is past the store's own offset (a write of the offset alone)."""
    if offset > _reflected(store):
        store.commit({}, offset)


def _reflected(store: StateStore) -> int:
    """The changelog offset ``store`` reflects, -1 for a new one."""
    reflected = store.changelog_offset()
    return -1 if reflected is None else reflected


def open_or_recreate(directory: Path, deadline: float) -> StateStore:
    """The store in ``directory``. One that cannot be opened (corrupt, not a store) is only a
    lost cache: deleted, and restored from the beginning of the changelog by the caller. One
    that another client holds open is waited for until ``deadline`` (a previous owner letting
    go), then StateStoreLockedError: the role stops and its restart tries again. Never
    deleted, since the other RocksDB would go on writing files into the directory of the new
    one, and the state stage 2 deduplicates by with them (invariant 5)."""
    while True:
        try:
            return StateStore.open(directory)
        except StateStoreLockedError:
            if time.monotonic() + LOCK_RETRY_S > deadline:
                raise
            time.sleep(LOCK_RETRY_S)
        except DeduplicatorError as exc:
            log.warning("state store unusable; restoring from the changelog", error=str(exc))
            StateStore.destroy(directory)
            return StateStore.open(directory)
