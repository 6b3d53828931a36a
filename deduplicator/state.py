"""The local RocksDB copy of one staging partition's dedup state (docs/design.md §3, invariant 5).

Kafka is the truth: the compacted changelog topic, written in the deduplicator's transaction
(deduplicator/layout.py: one partition for every staging partition's state, or one per staging
partition in flows made before). This store is a rebuildable cache of one staging partition's
records of it. Every write to it, a commit after a transaction or a batch of restored changelog
records, is ONE RocksDB write batch that also carries the changelog offset it reflects: the store
always equals its staging partition's records up to `changelog_offset()`, and restoring from
`changelog_offset() + 1` makes it whole again, after a crash at any instruction.

A directory that cannot be opened as a store (not a RocksDB, corrupt, a file in its place) raises
StateStoreError naming it; the caller may then `StateStore.destroy` it and restore from the
beginning of the changelog, which loses nothing. A store another client holds open raises
StateStoreLockedError, and must not be destroyed: that client's RocksDB still writes there.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Self

import msgpack
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from deduplicator.errors import StateStoreError, StateStoreLockedError
from deduplicator.rule import PartitionState, decode_state, encode_state
from runtime.closeable import Closeable

# State keys are UTF-8 text (rule.state_key), where the byte 0xff never occurs: no state key can
# collide with a key under this prefix.
_RESERVED_PREFIX = b"\xff"
_OFFSET_KEY = _RESERVED_PREFIX + b"changelog-offset"
_OFFSET = struct.Struct(">q")
# In RocksDB's answer when another client holds the store: "While lock file: <dir>/LOCK: ..."
# from another process, "lock hold by current process ... <dir>/LOCK: ..." from this one.
_LOCK_HELD = "/LOCK: "

RESTORE_BATCH_SIZE = 10_000
# States held in memory for the hot path; one per source partition of this staging partition,
# so the bound is rarely reached. Oldest entries go first when it is.
CACHE_LIMIT = 100_000
# The dedup state is a few keys rewritten often: a small memtable per store, as a process holds
# one store per assigned staging partition.
_WRITE_BUFFER_BYTES = 4 << 20


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(_WRITE_BUFFER_BYTES)
    return options


def _write_options() -> WriteOptions:
    # The WAL stays on, so a write batch is atomic and survives a killed process (it is in the
    # OS page cache once written). No fsync per batch: an OS crash or power loss may lose the
    # last batches, which only leaves the store at an older changelog offset, and restore from
    # `changelog_offset() + 1` fills that tail in from Kafka, the truth.
    options = WriteOptions()
    options.sync = False
    # rocksdict's stub declares the property disable_wal a method.
    options.disable_wal = False  # type: ignore[method-assign,assignment]
    return options


class StateStore(Closeable):
    """The dedup state of the source partitions of one staging partition, and its changelog offset.

    Not thread-safe: one deduplicator loop owns it. Use it as a context manager, or `close()` it
    in a `finally`; closing twice is fine.
    """

    def __init__(self, directory: Path, db: Rdict, offset: int | None) -> None:
        self._directory = directory
        self._db: Rdict | None = db
        self._offset = offset
        self._write_options = _write_options()
        self._cache: dict[bytes, PartitionState | None] = {}

    @classmethod
    def open(cls, directory: Path) -> Self:
        """Open the store in `directory`, creating it if missing."""
        try:
            db = Rdict(str(directory), options=_options())
        except Exception as e:  # rocksdict raises plain Exception for every failure
            if _LOCK_HELD in str(e):  # RocksDB names the lock file whoever holds it
                raise StateStoreLockedError(
                    f"the state store in {directory} is open elsewhere (its lock is held: {e})"
                ) from e
            raise StateStoreError(
                f"cannot open the state store in {directory}: {e} (if it is corrupt, delete it "
                "and restore from the changelog from the beginning)"
            ) from e
        try:
            offset = _read_offset(db, directory)
        except BaseException:
            db.close()
            raise
        return cls(directory, db, offset)

    @staticmethod
    def destroy(directory: Path) -> None:
        """Delete the store's directory (or whatever is in its place); it must not be open."""
        if directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory)
        else:
            directory.unlink(missing_ok=True)

    @property
    def directory(self) -> Path:
        return self._directory

    def changelog_offset(self) -> int | None:
        """The offset of the last changelog record this store reflects; None for a new store."""
        return self._offset

    def get(self, key: bytes) -> PartitionState | None:
        """The state of one source partition (key: rule.state_key), None if never seen."""
        try:
            return self._cache[key]
        except KeyError:
            pass
        db = self._live_db()
        try:
            data = db.get(key)
        except Exception as e:  # rocksdict raises plain Exception for every failure
            raise StateStoreError(f"cannot read the state store in {self._directory}: {e}") from e
        state = None if data is None else self._decode(key, data, "")
        self._remember(key, state)
        return state

    def commit(self, states: Mapping[bytes, PartitionState], changelog_offset: int) -> None:
        """Write the states of a committed transaction and the offset of its last changelog record.

        Call only after the Kafka transaction that wrote them to the changelog committed
        (invariant 5). The offset never moves backwards: a lower one, or the same one with new
        states, is a bug upstream and raises StateStoreError.
        """
        db = self._live_db()
        stored = self._offset
        if changelog_offset < 0 or (
            stored is not None
            and (changelog_offset < stored or (changelog_offset == stored and states))
        ):
            raise StateStoreError(
                f"state store {self._directory}: commit at changelog offset {changelog_offset} "
                f"after offset {stored}"
            )
        batch = WriteBatch(raw_mode=True)
        for key, state in states.items():
            _check_key(key, self._directory)
            batch.put(key, encode_state(state))
        self._write(db, batch, changelog_offset)
        for key, state in states.items():
            self._remember(key, state)

    def restore(
        self,
        records: Iterable[tuple[bytes, bytes | None, int]],
        batch_size: int = RESTORE_BATCH_SIZE,
    ) -> int:
        """Apply changelog records (key, value or None for a tombstone, offset), in offset order.

        Read them from `changelog_offset() + 1` (or the beginning for a new store). Every
        `batch_size` records are one write batch carrying the offset of its last record, so an
        interrupted restore leaves the store at a batch boundary, ready to resume. Returns the
        number of records applied.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size} < 1")
        db = self._live_db()
        last = -1 if self._offset is None else self._offset
        batch = WriteBatch(raw_mode=True)
        pending: dict[bytes, PartitionState | None] = {}
        in_batch = applied = 0
        for key, value, offset in records:
            if offset <= last:
                raise StateStoreError(
                    f"state store {self._directory}: changelog record at offset {offset} "
                    f"after offset {last}"
                )
            _check_key(key, self._directory)
            if value is None:
                batch.delete(key)
                pending[key] = None
            else:
                # Decoded now, so a changelog record this build cannot read fails here, by offset.
                pending[key] = self._decode(key, value, f" at changelog offset {offset}")
                batch.put(key, value)
            last = offset
            in_batch += 1
            if in_batch == batch_size:
                self._apply(db, batch, last, pending)
                applied += in_batch
                batch, pending, in_batch = WriteBatch(raw_mode=True), {}, 0
        if in_batch:
            self._apply(db, batch, last, pending)
            applied += in_batch
        return applied

    def close(self) -> None:
        db, self._db = self._db, None
        self._cache.clear()
        if db is not None:
            db.close()

    def _apply(
        self,
        db: Rdict,
        batch: WriteBatch,
        offset: int,
        pending: dict[bytes, PartitionState | None],
    ) -> None:
        self._write(db, batch, offset)
        for key, state in pending.items():
            self._remember(key, state)

    def _write(self, db: Rdict, batch: WriteBatch, offset: int) -> None:
        batch.put(_OFFSET_KEY, _OFFSET.pack(offset))
        try:
            db.write(batch, write_opt=self._write_options)
        except Exception as e:  # rocksdict raises plain Exception for every failure
            raise StateStoreError(f"cannot write the state store in {self._directory}: {e}") from e
        self._offset = offset

    def _remember(self, key: bytes, state: PartitionState | None) -> None:
        cache = self._cache
        if key not in cache and len(cache) >= CACHE_LIMIT:
            del cache[next(iter(cache))]
        cache[key] = state

    def _decode(self, key: bytes, data: bytes, where: str) -> PartitionState:
        try:
            return decode_state(data)
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise StateStoreError(
                f"state store {self._directory}: unreadable state of {key!r}{where}: {e}"
            ) from e

    def _live_db(self) -> Rdict:
        if self._db is None:
            raise StateStoreError(f"state store {self._directory} is closed")
        return self._db


def _read_offset(db: Rdict, directory: Path) -> int | None:
    try:
        data = db.get(_OFFSET_KEY)
    except Exception as e:  # rocksdict raises plain Exception for every failure
        raise StateStoreError(f"cannot read the state store in {directory}: {e}") from e
    if data is None:
        return None
    if len(data) != _OFFSET.size:
        raise StateStoreError(f"state store {directory}: changelog offset is {data!r}")
    offset: int = _OFFSET.unpack(data)[0]
    return offset


def _check_key(key: bytes, directory: Path) -> None:
    if key.startswith(_RESERVED_PREFIX):
        raise StateStoreError(f"state store {directory}: {key!r} is not a state key")
