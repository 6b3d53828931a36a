"""Progress while the audit runs: the phase, and Spark's task counts for it.

On a terminal a live line is redrawn (rich); elsewhere (CI logs, a pod) one plain line per
phase, with the seconds the previous one took, so a log shows where the time went.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import SparkContext, StatusTracker
from rich.console import Console
from rich.status import Status

_REFRESH_S = 0.5


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._live = self._console.is_terminal
        self._phase = "starting"
        self._phase_started = time.monotonic()
        self._started = self._phase_started
        self._tracker: StatusTracker | None = None
        self._stop = threading.Event()
        self._status: Status | None = None

    def watch(self, spark_context: SparkContext) -> None:
        """Show the task counts of the jobs this SparkContext runs from now on."""
        self._tracker = spark_context.statusTracker()

    def phase(self, name: str) -> None:
        now = time.monotonic()
        if not self._live:
            print(
                f"exactly validate: {name} (previous step {now - self._phase_started:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        self._phase, self._phase_started = name, now

    @contextmanager
    def running(self) -> Iterator[Progress]:
        if not self._live:
            yield self
            return
        with self._console.status(self._line()) as status:
            self._status = status
            thread = threading.Thread(target=self._refresh, name="progress", daemon=True)
            thread.start()
            try:
                yield self
            finally:
                self._stop.set()
                thread.join()

    def _refresh(self) -> None:
        while not self._stop.wait(_REFRESH_S):
            if self._status is not None:
                self._status.update(self._line())

    def _line(self) -> str:
        tasks = ""
        if self._tracker is not None:
            done = total = 0
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total:
                tasks = f" — Spark tasks {done}/{total}"
        return f"{self._phase}{tasks} ({time.monotonic() - self._started:.0f} s)"
