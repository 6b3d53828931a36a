"""The staging partitions one stage-2 instance owns: each one's state store, opened and brought up
to date from the changelog on assignment and closed when it goes, and each one's committed
position, which a rewind seeks back to (docs/design.md §3.5, invariant 5)."""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

from confluent_kafka import Consumer, Message, TopicPartition

from deduplicator.backlog import Backlog
from deduplicator.errors import DeduplicatorError, StateStoreLockedError
from deduplicator.limits import LOCK_RETRY_S, RESTORE_DEADLINE_S
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.restore import (
    ChangelogReader,
    await_stable_offsets,
    changelog_end,
    changelog_reader,
    changelog_tail,
)
from deduplicator.state import StateStore
from runtime import Settings, get_logger

# The loop's logger: these lines kept the name they had when the loop owned the partitions.
log = get_logger("deduplicator.loop")


class Partitions:
    """The owned staging partitions' state stores (``stores``, by partition) and positions."""

    def __init__(
        self,
        settings: Settings,
        changelog_topic: str,
        metrics: DeduplicatorMetrics,
        backlog: Backlog,
    ) -> None:
        self.settings = settings
        self.changelog_topic = changelog_topic
        self.metrics = metrics
        self.backlog = backlog
        self._state_root = Path(settings.state_dir) / settings.flow
        self.stores: dict[int, StateStore] = {}
        # Where each assigned staging partition's committed position is, as this process knows
        # it without asking the group coordinator (rewind): the offset of the first record
        # the consumer returned since the assignment, then each commit's.
        self._positions: dict[int, int] = {}

    def assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        deadline = time.monotonic() + RESTORE_DEADLINE_S
        # First the offsets, then the changelog: a previous owner's offsets pending in a
        # transaction whose changelog records are not in the log yet (invariant 5).
        await_stable_offsets(consumer, partitions, deadline)
        with changelog_reader(self.settings) as reader:
            for tp in partitions:
                self._positions.pop(tp.partition, None)  # read again from the group's commit
                if (held := self.stores.pop(tp.partition, None)) is not None:
                    held.close()  # assigned again without a revoke: its lock would be ours
                self.stores[tp.partition] = self._open_store(reader, tp.partition, deadline)
        self.metrics.assigned_partitions.set(len(self.stores))
        log.info("staging partitions assigned", partitions=[tp.partition for tp in partitions])

    def release(self, partitions: list[TopicPartition]) -> None:
        self.backlog.forget([tp.partition for tp in partitions])
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
        self, reader: ChangelogReader, partition: int, store: StateStore, deadline: float
    ) -> StateStore:
        """``store``, or a new empty one in its place when it reflects changelog offsets the
        changelog does not hold.

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
        end = changelog_end(reader, self.changelog_topic, partition)
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
            store = self._prefix_of_the_changelog(reader, partition, store, deadline)
            reflected = store.changelog_offset()
            start = 0 if reflected is None else reflected + 1
            tail = changelog_tail(reader, self.changelog_topic, partition, start, deadline)
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
