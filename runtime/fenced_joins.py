"""How often a role's consumer may be fenced as a static member and join again.

After a group coordinator moved, or while it could not be reached, the member that fences a
consumer's static membership is most often the consumer's own later join (runtime.member_fenced):
the role makes its consumer anew under the same ``group.instance.id`` and goes on. A live twin
holding the same identity fences it again and again: past ``MAX_FENCED_JOINS`` within
``FENCED_JOINS_WINDOW_S`` the role stops as fenced rather than fight over the identity."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException

from runtime.logs import get_logger

log = get_logger(__name__)

MAX_FENCED_JOINS = 3
FENCED_JOINS_WINDOW_S = 300.0


class FencedJoins:
    """The joins of one role's consumer after its static member was fenced."""

    def __init__(self, consumer: str) -> None:
        self._consumer = consumer  # what the log line calls it: "source consumer", ...
        self._times: list[float] = []

    def count(self, fenced: KafkaError) -> None:
        """One more join, said in one warning; raises ``fenced`` as FENCED_INSTANCE_ID (the
        role's exit as fenced) once they come too often to be its own."""
        now = time.monotonic()
        self._times = [t for t in self._times if now - t < FENCED_JOINS_WINDOW_S]
        self._times.append(now)
        if len(self._times) > MAX_FENCED_JOINS:
            raise KafkaException(KafkaError(KafkaError.FENCED_INSTANCE_ID, fenced.str()))
        log.warning(
            f"{self._consumer} fenced as a static member; joining again with a new one",
            error=fenced.str(),
            times=len(self._times),
        )
