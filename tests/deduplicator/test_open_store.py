"""Opening a partition's state store on assignment (deduplicator/partitions.py): a corrupt store is
a lost cache, deleted and restored; a store another process holds open is never deleted, only
waited for, since that process's RocksDB would go on writing files into the new store's
directory."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deduplicator.errors import StateStoreLockedError
from deduplicator.partitions import open_or_recreate
from deduplicator.rule import PartitionState, state_key
from deduplicator.state import StateStore

KEY = state_key("cluster-a", "orders", 0)
STATE = PartitionState(bytes(range(16)), 41, ())
# Holds the store open until its stdin closes, as a previous owner that still runs.
HOLDER = """
import sys
from deduplicator.state import StateStore
store = StateStore.open(__import__("pathlib").Path(sys.argv[1]))
print("open", flush=True)
sys.stdin.read()
store.close()
"""


def _committed_store(directory: Path) -> None:
    with StateStore.open(directory) as store:
        store.commit({KEY: STATE}, changelog_offset=7)


def _holder(directory: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "open\n"
    return holder


def _let_go(holder: subprocess.Popen[str]) -> None:
    holder.communicate(timeout=30)  # closes its stdin, and our ends of its pipes
    assert holder.returncode == 0


def test_a_store_another_process_holds_is_kept_and_the_open_gives_up_at_the_deadline(tmp_path):
    directory = tmp_path / "flow" / "0"
    _committed_store(directory)
    holder = _holder(directory)
    try:
        started = time.monotonic()
        with pytest.raises(StateStoreLockedError, match=str(directory)):
            open_or_recreate(directory, deadline=started + 1.5)
        assert time.monotonic() - started < 10
    finally:
        _let_go(holder)
    with StateStore.open(directory) as store:
        assert (store.get(KEY), store.changelog_offset()) == (STATE, 7)


def test_a_store_let_go_within_the_deadline_opens_with_its_state(tmp_path):
    directory = tmp_path / "flow" / "0"
    _committed_store(directory)
    holder = _holder(directory)
    releaser = threading.Timer(1.0, _let_go, args=(holder,))
    releaser.start()
    try:
        with open_or_recreate(directory, deadline=time.monotonic() + 30) as store:
            assert (store.get(KEY), store.changelog_offset()) == (STATE, 7)
    finally:
        releaser.join()


def test_a_corrupt_store_is_deleted_and_opened_empty(tmp_path):
    directory = tmp_path / "flow" / "0"
    _committed_store(directory)
    (directory / "CURRENT").write_text("garbage\n")
    with open_or_recreate(directory, deadline=time.monotonic() + 30) as store:
        assert (store.get(KEY), store.changelog_offset()) == (None, None)
