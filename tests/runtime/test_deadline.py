"""runtime.deadline: a call blocked past its hard deadline ends the process with status 1 and
one log line naming the call, or (call_with_deadline) is handed back to the caller as
ClientHungError while it goes on in its own thread; a call that finishes in time leaves the
process alone."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from runtime.deadline import call_with_deadline
from runtime.errors import ClientHungError

ROOT = Path(__file__).resolve().parents[2]

_PROGRAM = """
import time
from runtime.deadline import hard_deadline
from runtime.logs import configure_logging
configure_logging("INFO", "test")
with hard_deadline({deadline}, "slow_call"):
    time.sleep({sleep})
print("finished")
"""


def _run(deadline: float, sleep: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM.format(deadline=deadline, sleep=sleep)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_call_blocked_past_its_deadline_exits_1_and_says_which():
    done = _run(deadline=0.3, sleep=30)
    assert done.returncode == 1
    assert "finished" not in done.stdout
    output = done.stdout + done.stderr
    assert "blocked past its hard deadline" in output
    assert "call=slow_call" in output


def test_a_call_within_its_deadline_goes_on():
    done = _run(deadline=30, sleep=0.1)
    assert done.returncode == 0
    assert done.stdout.strip().endswith("finished")


def test_call_with_deadline_hands_back_a_hung_call_and_goes_on():
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(ClientHungError, match="slow_call blocked past its hard deadline") as hung:
        call_with_deadline(lambda: release.wait(30), 0.3, "slow_call")
    assert time.monotonic() - started < 5
    thread = hung.value.thread
    assert isinstance(thread, threading.Thread)
    assert thread.is_alive()
    release.set()  # the stuck call ends later, on its own thread
    thread.join(5)
    assert not thread.is_alive()


def test_call_with_deadline_returns_or_raises_what_the_call_did():
    assert call_with_deadline(lambda: 42, 5, "quick") == 42

    def refused() -> None:
        raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))

    with pytest.raises(KafkaException):
        call_with_deadline(refused, 5, "refused")
