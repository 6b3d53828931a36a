"""Topic discovery off the copy loop: a thread of its own runs a round every interval and hands
the loop what it found, which the loop applies without waiting.

Why a thread: a round's admin calls wait up to 30 s each for a broker that died, and run in the
loop they stopped every partition's copy, not only the dead leader's (issue 31: the whole
destination stood still for 28-39 s after each source broker SIGKILL).

The hand-over is one slot under a lock, read by ``take`` and never waited on: the latest
finished round (a newer one replaces one not yet taken: each is whole), or the error that ended
the thread (a missing ACL, refused credentials), which the loop raises as if the round had run
in it. A round that fails otherwise (a timeout, a broker restarting) hands over nothing, and
the next one comes an interval later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from runtime import get_logger

log = get_logger(__name__)

T = TypeVar("T")


class DiscoveryThread(Generic[T]):
    """Runs ``run_round()`` every ``interval_s`` on its own thread until ``stop``; it
    returns what it found, or None when it found nothing to hand over."""

    def __init__(self, run_round: Callable[[], T | None], interval_s: float) -> None:
        self._round = run_round
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards the slot below: written here, taken by the loop
        self._found: T | None = None
        self._failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="topic-discovery", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def take(self) -> T | None:
        """The latest round finished since the last ``take``, or None; at once. Raises the
        error that ended the thread."""
        with self._lock:
            if self._failure is not None:
                raise self._failure
            found, self._found = self._found, None
        return found

    def stop(self) -> None:
        """Start no new round; one under way runs to its end (its admin calls are bounded)."""
        self._stopping.set()

    def join(self, timeout_s: float) -> None:
        """Wait for the thread to end, so that no round is using the admin clients when the
        process destroys them before the interpreter's exit (runtime/role.py)."""
        self.stop()
        if self._thread.ident is None:
            return  # never started: start-up stopped first
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("topic discovery round still running at exit", waited_s=timeout_s)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                found = self._round()
            except Exception as exc:  # the loop raises it: the round's errors end the process
                with self._lock:
                    self._failure = exc
                return
            if found is not None:
                with self._lock:
                    self._found = found
