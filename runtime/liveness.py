"""Liveness from the main loop's own heartbeat: a process whose loop stopped turning (stuck in a
call that never returns) answers /healthz with 503, so its orchestrator restarts it, and prints
every thread's Python stack to its log once, so that the restart leaves behind where it waited
(offset sync once stood still for minutes under three-node faults, and nothing said where)."""

from __future__ import annotations

import faulthandler
import sys
import threading
import time
from typing import TextIO

from runtime.http import Health
from runtime.logs import get_logger

log = get_logger(__name__)

_CHECK_INTERVAL_S = 1.0


class Heartbeat:
    """The loop calls `beat()` every turn; a daemon thread marks the process not live when the
    beats stop for `max_silence_s`, and live again when they resume."""

    def __init__(
        self, health: Health, max_silence_s: float, stacks_to: TextIO | None = None
    ) -> None:
        self._health = health
        self._max_silence_s = max_silence_s
        self._stacks_to = stacks_to  # sys.stderr when None: the role's log
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="heartbeat", daemon=True)

    def beat(self) -> None:
        self._last = time.monotonic()  # one attribute store: cheap enough for every turn

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        said = False  # the stacks of this silence are in the log
        while not self._stop.wait(_CHECK_INTERVAL_S):
            silence = time.monotonic() - self._last
            if silence > self._max_silence_s:
                self._health.set_live(False, f"main loop silent for {silence:.0f} s")
                if not said:
                    said = True
                    log.warning(
                        "main loop silent; every thread's stack follows", seconds=round(silence)
                    )
                    faulthandler.dump_traceback(self._stacks_to or sys.stderr, all_threads=True)
            else:
                self._health.set_live(True)
                said = False
