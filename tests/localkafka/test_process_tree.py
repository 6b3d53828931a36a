"""process_tree: a process and every live descendant, which the benches sum CPU and memory over."""

from __future__ import annotations

import subprocess
import time

from localkafka import process_tree


def test_a_process_tree_holds_its_children_and_their_children() -> None:
    # bash -> (sleep, bash -> sleep): two levels below the root.
    root = subprocess.Popen(["bash", "-c", "sleep 60 & bash -c 'sleep 60 & wait' & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(tree := process_tree(root.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree[0] == root.pid
        assert len(set(tree)) == 4
    finally:
        for pid in reversed(process_tree(root.pid)):
            subprocess.run(["kill", str(pid)], check=False)
        root.wait(10)
