"""Finding a cluster's active KRaft controller in its nodes' logs."""

from __future__ import annotations

from pathlib import Path

from exactly.chaos.quorum import active_controller, last_active_epoch


def _log(path: Path, *epochs: int) -> Path:
    lines = ["[2026-01-01 10:00:00,000] INFO [RaftManager id=1] Completed transition to ...\n"]
    lines += [
        f"[2026-01-01 10:00:0{i},000] INFO [QuorumController id=1] Becoming the active "
        f"controller at epoch {epoch}, next write offset 1. "
        "(org.apache.kafka.controller.QuorumController)\n"
        for i, epoch in enumerate(epochs)
    ]
    path.write_text("".join(lines) + "INFO something else\n" * 50)
    return path


def test_the_node_that_became_active_at_the_highest_epoch_is_the_controller(tmp_path: Path):
    # Node 1 led at epochs 1 and 4, node 2 at 3; node 3 never did.
    logs = [
        (1, _log(tmp_path / "1.log", 1, 4)),
        (2, _log(tmp_path / "2.log", 3)),
        (3, _log(tmp_path / "3.log")),
    ]
    assert last_active_epoch(logs[0][1]) == 4
    assert last_active_epoch(logs[2][1]) is None
    assert active_controller(logs) == 1
    # Node 1 is down: of the running nodes, node 2 led last.
    assert active_controller(logs[1:]) == 2


def test_no_log_naming_a_controller_is_no_answer(tmp_path: Path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert active_controller([(1, empty), (2, tmp_path / "missing.log")]) is None
    assert active_controller([]) is None
