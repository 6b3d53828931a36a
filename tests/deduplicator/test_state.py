"""StateStore: the local RocksDB copy of the dedup state always equals a prefix of the changelog.

The crash test kills a process that is committing; the property test interrupts restores at
random points and resumes them from `changelog_offset() + 1`.
"""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deduplicator.errors import StateStoreError, StateStoreLockedError
from deduplicator.rule import PartitionState, decode_state, encode_state, state_key
from deduplicator.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
KEYS = [state_key("cluster-a", "orders", p) for p in range(4)]
TOPIC_ID = bytes(range(16))


def state(high: int, topic_id: bytes = TOPIC_ID) -> PartitionState:
    return PartitionState(topic_id, high, (b"old-id",) if high % 2 else ())


def contents(store: StateStore) -> tuple[dict[bytes, PartitionState | None], int | None]:
    return {key: store.get(key) for key in KEYS}, store.changelog_offset()


def test_commit_then_reopen(tmp_path):
    directory = tmp_path / "store"
    with StateStore.open(directory) as store:
        assert store.changelog_offset() is None
        assert store.get(KEYS[0]) is None  # remembered as absent, then committed below
        store.commit({KEYS[0]: state(5), KEYS[1]: state(7)}, changelog_offset=11)
        store.commit({KEYS[0]: state(9)}, changelog_offset=12)
        expected = {KEYS[0]: state(9), KEYS[1]: state(7), KEYS[2]: None, KEYS[3]: None}
        assert contents(store) == (expected, 12)
    with StateStore.open(directory) as store:
        assert store.changelog_offset() == 12
        assert store.get(KEYS[0]) == state(9)
        assert store.get(KEYS[1]) == state(7)
        assert store.get(KEYS[2]) is None


def test_offset_never_moves_backwards(tmp_path):
    directory = tmp_path / "store"
    with StateStore.open(directory) as store:
        store.commit({KEYS[0]: state(5)}, changelog_offset=10)
        with pytest.raises(StateStoreError, match="offset 9 after offset 10"):
            store.commit({KEYS[0]: state(6)}, changelog_offset=9)
        with pytest.raises(StateStoreError, match="offset 10 after offset 10"):
            store.commit({KEYS[0]: state(6)}, changelog_offset=10)
        with pytest.raises(StateStoreError, match="offset 9 after offset 10"):
            store.restore([(KEYS[0], encode_state(state(6)), 9)])
        assert contents(store)[1] == 10
        assert store.get(KEYS[0]) == state(5)
    with StateStore.open(directory) as store:
        assert store.changelog_offset() == 10
        assert store.get(KEYS[0]) == state(5)


def test_restore_applies_tombstones_and_takes_the_last_offset(tmp_path):
    directory = tmp_path / "store"
    records = [
        (KEYS[0], encode_state(state(1)), 0),
        (KEYS[1], encode_state(state(2)), 3),
        (KEYS[0], None, 4),
        (KEYS[2], encode_state(state(3)), 8),
        (KEYS[2], encode_state(state(4)), 9),
    ]
    expected = ({KEYS[0]: None, KEYS[1]: state(2), KEYS[2]: state(4), KEYS[3]: None}, 9)
    with StateStore.open(directory) as store:
        assert store.get(KEYS[0]) is None
        store.commit({KEYS[0]: state(0)}, changelog_offset=0)  # cached, then deleted by restore
        assert store.restore(records[1:], batch_size=2) == 4
        assert contents(store) == expected
    with StateStore.open(directory) as store:
        assert contents(store) == expected


def test_restore_names_an_unreadable_record(tmp_path):
    with StateStore.open(tmp_path / "store") as store:
        with pytest.raises(StateStoreError, match="at changelog offset 7"):
            store.restore([(KEYS[0], encode_state(state(1)), 6), (KEYS[1], b"\x01garbage", 7)])
        assert store.changelog_offset() is None  # the batch holding the bad record is not written
        assert store.get(KEYS[0]) is None


def test_reserved_keys_are_refused(tmp_path):
    with StateStore.open(tmp_path / "store") as store:
        with pytest.raises(StateStoreError, match="not a state key"):
            store.commit({b"\xffchangelog-offset": state(1)}, changelog_offset=1)
        with pytest.raises(StateStoreError, match="not a state key"):
            store.restore([(b"\xffchangelog-offset", None, 1)])


def _garbage_current(directory: Path) -> None:
    (directory / "CURRENT").write_text("garbage\n")


def _garbage_manifest(directory: Path) -> None:
    for manifest in directory.glob("MANIFEST-*"):
        manifest.write_bytes(bytes(range(256)) * 4)


def _file_in_its_place(directory: Path) -> None:
    StateStore.destroy(directory)
    directory.write_bytes(b"not a directory")


@pytest.mark.parametrize("corrupt", [_garbage_current, _garbage_manifest, _file_in_its_place])
def test_corrupt_store_names_its_path_and_destroy_recovers(tmp_path, corrupt):
    directory = tmp_path / "flow" / "3"
    with StateStore.open(directory) as store:
        store.commit({KEYS[0]: state(5)}, changelog_offset=10)
    corrupt(directory)
    with pytest.raises(StateStoreError) as raised:
        StateStore.open(directory)
    assert str(directory) in str(raised.value)
    StateStore.destroy(directory)
    with StateStore.open(directory) as store:
        assert contents(store) == (dict.fromkeys(KEYS), None)


def test_a_store_open_twice_is_locked_not_corrupt(tmp_path):
    with StateStore.open(tmp_path / "store"), pytest.raises(StateStoreLockedError, match="LOCK"):
        StateStore.open(tmp_path / "store")


def test_close_twice_and_use_after_close(tmp_path):
    store = StateStore.open(tmp_path / "store")
    store.close()
    store.close()
    with pytest.raises(StateStoreError, match="closed"):
        store.get(KEYS[0])
    with StateStore.open(tmp_path / "store") as again:  # the lock was released
        again.close()
    StateStore.destroy(tmp_path / "store")
    StateStore.destroy(tmp_path / "store")  # nothing there any more: fine
    assert not (tmp_path / "store").exists()


# The child commits batches that move every key to `high = batch number`, batch i reflecting
# changelog offsets up to i * len(KEYS) + len(KEYS) - 1, until a thread SIGKILLs it at a random
# moment mid-way.
_CRASHING_CHILD = """
import os, random, signal, sys, threading, time
from pathlib import Path
from deduplicator.rule import PartitionState, state_key
from deduplicator.state import StateStore

directory, seed = Path(sys.argv[1]), int(sys.argv[2])
keys = [state_key("cluster-a", "orders", p) for p in range(int(sys.argv[3]))]
started = threading.Event()

def kill():
    started.wait()
    time.sleep(random.Random(seed).uniform(0, 0.1))
    os.kill(os.getpid(), signal.SIGKILL)

threading.Thread(target=kill, daemon=True).start()
store = StateStore.open(directory)
for batch in range(1_000_000):
    states = {key: PartitionState(b"id", batch) for key in keys}
    store.commit(states, changelog_offset=batch * len(keys) + len(keys) - 1)
    if batch == 3:
        started.set()
"""
CRASH_KEYS = [state_key("cluster-a", "orders", p) for p in range(200)]


def changelog_batch(batch: int) -> list[tuple[bytes, bytes, int]]:
    value = encode_state(PartitionState(b"id", batch))
    first = batch * len(CRASH_KEYS)
    return [(key, value, first + n) for n, key in enumerate(CRASH_KEYS)]


@pytest.mark.parametrize("seed", range(3))
def test_a_killed_commit_leaves_a_consistent_prefix_that_restore_completes(tmp_path, seed):
    directory = tmp_path / "store"
    child = subprocess.run(
        [sys.executable, "-c", _CRASHING_CHILD, str(directory), str(seed), str(len(CRASH_KEYS))],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    with StateStore.open(directory) as store:
        offset = store.changelog_offset()
        assert offset is not None
        assert (offset + 1) % len(CRASH_KEYS) == 0, offset
        batch = offset // len(CRASH_KEYS)
        assert batch >= 3
        for key in CRASH_KEYS:
            assert store.get(key) == PartitionState(b"id", batch), (key, offset)
        # The changelog (the truth) got further than the store: restore from the next offset.
        changelog = [record for n in range(batch + 3) for record in changelog_batch(n)]
        tail = [record for record in changelog if record[2] > offset]
        assert store.restore(tail, batch_size=150) == 2 * len(CRASH_KEYS)
    with StateStore.open(directory) as store:
        assert store.changelog_offset() == changelog[-1][2]
        for key in CRASH_KEYS:
            assert store.get(key) == PartitionState(b"id", batch + 2)


class RestoreInterruptedError(Exception):
    pass


changelog_steps = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.none() | st.integers(0, 100).map(state),  # None: a tombstone
        st.integers(1, 3),  # offset gap: compaction and transaction markers leave holes
    ),
    max_size=30,
)


def model(records: list[tuple[bytes, bytes | None, int]]) -> tuple[dict, int | None]:
    """What the store should hold after `records`: the last value of each key, and the offset."""
    states: dict[bytes, PartitionState | None] = dict.fromkeys(KEYS)
    for key, value, _ in records:
        states[key] = None if value is None else decode_state(value)
    return states, (records[-1][2] if records else None)


@settings(max_examples=40, deadline=None)
@given(steps=changelog_steps, start=st.integers(0, 5), batch_size=st.integers(1, 4), data=st.data())
def test_resumed_restore_equals_restore_from_scratch(steps, start, batch_size, data):
    records = []
    offset = start - 1
    for key, value, gap in steps:
        offset += gap
        records.append((key, None if value is None else encode_state(value), offset))
    cut = data.draw(st.integers(0, len(records)), label="cut")

    def interrupted():
        yield from records[:cut]
        raise RestoreInterruptedError

    with tempfile.TemporaryDirectory() as tmp:
        with StateStore.open(Path(tmp, "full")) as full:
            full.restore(records, batch_size)
            from_scratch = contents(full)
        assert from_scratch == model(records)

        with StateStore.open(Path(tmp, "resumed")) as resumed:
            with pytest.raises(RestoreInterruptedError):
                resumed.restore(interrupted(), batch_size)
            # Only whole batches were written, and the in-memory view agrees with them.
            assert contents(resumed) == model(records[: cut // batch_size * batch_size])
        with StateStore.open(Path(tmp, "resumed")) as resumed:
            stored = resumed.changelog_offset()
            resumed.restore(r for r in records if stored is None or r[2] > stored)
            assert contents(resumed) == from_scratch
        with StateStore.open(Path(tmp, "resumed")) as resumed:
            assert contents(resumed) == from_scratch
