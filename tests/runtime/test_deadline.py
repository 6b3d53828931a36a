"""runtime.deadline: a call blocked past its hard deadline ends the process with status 1 and
one log line naming the call; a call that finishes in time leaves the process alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
