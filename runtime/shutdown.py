"""SIGTERM drains: the role's loop sees ``requested``, finishes or aborts its transaction, exits 0.

    with GracefulShutdown() as shutdown:
        while not shutdown.requested:
            ...  # one transaction
            shutdown.wait(backoff)  # a sleep that ends early on a stop

A second SIGTERM or SIGINT while draining is logged (once) and otherwise ignored: the drain
goes on, and the orchestrator's grace period ends with SIGKILL if it takes too long.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

from runtime.logs import get_logger

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How soon wait() sees a signal. The handler only sets an attribute: setting the Event would
# take its lock, which the interrupted main thread may be holding (inside Event.wait): deadlock.
_SIGNAL_CHECK_SECONDS = 0.1

_log = get_logger(__name__)

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class GracefulShutdown:
    """The stop request of a process: from SIGTERM/SIGINT inside the ``with``, or ``request``.

    Entering installs the signal handlers (main thread only); leaving restores the previous
    ones. ``reason`` is the first request's: ``"SIGTERM"``, ``"SIGINT"`` or ``request``'s, and
    ``exit_status`` the status a drain after it ends the process with (0 unless ``request``
    said otherwise).
    """

    def __init__(self) -> None:
        self._reason: str | None = None
        self._exit_status = 0
        self._event = threading.Event()  # wakes wait() at once on request() from any thread
        self._lock = threading.Lock()  # request() against request(); the handler never takes it
        self._warned = False
        self._previous: dict[signal.Signals, _Handler] = {}

    @property
    def requested(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    @property
    def exit_status(self) -> int:
        return self._exit_status

    def request(self, reason: str, exit_status: int = 0) -> None:
        """Ask the process to stop (a fatal error, a test, renewed credentials); the first
        request's reason and exit status are kept: a SIGTERM already draining stays a SIGTERM."""
        with self._lock:
            first = self._reason is None
            if first:
                self._exit_status = exit_status
                self._reason = reason
        self._event.set()
        if first:
            _log.info("shutdown requested", reason=reason)

    def wait(self, timeout: float) -> bool:
        """Sleep until a stop is requested or ``timeout`` seconds pass; whether one was."""
        deadline = time.monotonic() + timeout
        while not self.requested:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._event.wait(min(remaining, _SIGNAL_CHECK_SECONDS))
        return True

    def __enter__(self) -> GracefulShutdown:
        for number in SIGNALS:
            self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for number, previous in self._previous.items():
            # None: the previous handler was not installed from Python; the default is closest.
            signal.signal(number, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        if self._reason is None:
            self._reason = name
            _log.info("shutdown requested, draining", signal=name)
        elif not self._warned:
            self._warned = True
            _log.warning("drain in progress, signal ignored", signal=name, reason=self._reason)
