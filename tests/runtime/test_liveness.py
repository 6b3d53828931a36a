"""The heartbeat turns /healthz's answer off when the loop stops beating, and on again."""

from __future__ import annotations

import time

from runtime import Health
from runtime.liveness import Heartbeat


def _await(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_silence_marks_the_process_not_live_and_a_beat_revives_it(tmp_path):
    health = Health()
    stacks = tmp_path / "stacks.txt"
    with (
        stacks.open("w") as stacks_to,
        Heartbeat(health, max_silence_s=0.3, stacks_to=stacks_to) as heartbeat,
    ):
        assert health.live
        assert _await(lambda: not health.live)
        assert "main loop silent" in health.live_reason
        # Where the silent loop waits, once: this test's own thread, in _await's sleep.
        assert _await(lambda: "_await" in stacks.read_text())
        time.sleep(1.5)
        assert stacks.read_text().count("_await") == 1
        # The loop turns again: beating on every poll, as it would.
        assert _await(lambda: heartbeat.beat() or health.live)


def test_a_beating_loop_stays_live():
    health = Health()
    with Heartbeat(health, max_silence_s=1.5) as heartbeat:
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            heartbeat.beat()
            assert health.live
            time.sleep(0.05)
