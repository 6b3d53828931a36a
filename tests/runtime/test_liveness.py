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


def test_silence_marks_the_process_not_live_and_a_beat_revives_it():
    health = Health()
    with Heartbeat(health, max_silence_s=0.3) as heartbeat:
        assert health.live
        assert _await(lambda: not health.live)
        assert "main loop silent" in health.live_reason
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
