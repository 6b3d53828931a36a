"""How often stage 2 may replace a transactional producer that librdkafka gave up for good
(runtime.producer_mendable): a new producer of the same transactional.id fences it, ends its
transaction and goes on. A fault that breaks every new producer as well is not a broker moving:
past MAX_BROKEN_PRODUCERS within BROKEN_PRODUCERS_WINDOW_S the role exits for a restart."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError

from deduplicator.errors import DeduplicatorError
from runtime import get_logger

# The loop's logger: the replacement is the loop's event.
log = get_logger("deduplicator.loop")

MAX_BROKEN_PRODUCERS = 3
BROKEN_PRODUCERS_WINDOW_S = 300.0


class BrokenProducers:
    def __init__(self) -> None:
        self._times: list[float] = []

    def count(self, error: KafkaError) -> None:
        """One more producer broken by ``error``, said in one warning; DeduplicatorError once
        they come too often for a broker event to explain."""
        now = time.monotonic()
        self._times = [t for t in self._times if now - t < BROKEN_PRODUCERS_WINDOW_S]
        self._times.append(now)
        if len(self._times) > MAX_BROKEN_PRODUCERS:
            raise DeduplicatorError(
                f"{len(self._times)} transactional producers failed for good within "
                f"{BROKEN_PRODUCERS_WINDOW_S:.0f} s, the last with {error.str()}"
            )
        log.warning(
            "transactional producer failed; replacing it",
            error=error.str(),
            times=len(self._times),
        )
