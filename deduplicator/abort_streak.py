"""Transactions aborted one after another with no commit between them: said at ERROR once it
lasts.

Each transaction that turns abortable (``Deduplicator._recover``) is a WARNING, and most are
mended by the next attempt (a leader moving, a coordinator loading). One that no abort mends (an
error code this build does not know, a destination topic deleted under the flow) would abort and
retry without end, each time at WARNING: nothing reaches the destination, and a log-based alert
keyed on ERROR never hears of it. After SAY_AFTER_S of aborts only (the ExactlyFlowStalled
alert's 5 minutes), one ERROR line says how many and the last error; a commit ends the streak,
and says so. So does a refusal the loop handled by stopping partitions (``handled``), and a
quiet spell as long as SAY_AFTER_S between two aborts: the next one starts a new streak, so an
idle flow's abort is not taken for hours of them. The loop goes on trying: a cause an operator
mends (a grant, a topic recreated) then needs no restart. Producers replaced when hung or
failed, and the aborts on a lost assignment, have lines of their own and are not counted."""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime import get_logger

# The loop's logger: a log query selects stage 2's transaction events on it.
log = get_logger("deduplicator.loop")

SAY_AFTER_S = 300.0


class AbortStreak:
    """The aborts since the last commit."""

    def __init__(
        self, say_after_s: float = SAY_AFTER_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._say_after_s = say_after_s
        self._clock = clock
        self._since: float | None = None
        self._last: float | None = None
        self._aborts = 0
        self._said = False

    @property
    def aborts(self) -> int:
        return self._aborts

    def aborted(self, error: str) -> None:
        """A transaction aborted with ``error``."""
        now = self._clock()
        if self._last is not None and now - self._last >= self._say_after_s:
            self.handled()  # a quiet spell between: not one streak
        if self._since is None:
            self._since = now
        self._last = now
        self._aborts += 1
        lasted_s = now - self._since
        if not self._said and lasted_s >= self._say_after_s:
            self._said = True
            log.error(
                "every transaction aborts: nothing has reached the destination since the first "
                "of these aborts (still trying; see the last error)",
                aborts=self._aborts,
                for_s=round(lasted_s),
                error=error,
            )

    def committed(self) -> None:
        """A transaction committed: the streak, if any, is over."""
        if self._said and self._since is not None:
            log.info(
                "a transaction committed after aborts in a row",
                aborts=self._aborts,
                for_s=round(self._clock() - self._since),
            )
        self.handled()

    def handled(self) -> None:
        """The streak's cause was dealt with (its partitions stopped): the count starts again."""
        self._since, self._last, self._aborts, self._said = None, None, 0, False
