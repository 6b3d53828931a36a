"""An admin client asked with our own deadline, and replaced when a request to a group's
coordinator goes unanswered (librdkafka #4605).

librdkafka 2.16 aborts the process (rd_kafka_enq_once_del_source_return: Assertion
`eonce->refcnt > 0', librdkafka #4605, open) when it times out a coordinator request while it is
still looking for the coordinator (FindCoordinator unanswered or not yet possible, the
coordinator's connection down) and the coordinator turns up later in the same client: the lookup
then goes on through a reference the timeout freed. Reproduced here whenever the coordinator
came back while the client lived: a broker frozen for 3 s (1 s timeout), a coordinator node
SIGKILLed on three nodes (10 s), a broker restarted (5 s). So librdkafka is given its maximum
request timeout (COORDINATOR_REQUEST_TIMEOUT_S) and never times such a request out itself; we
wait by TIMEOUT_S and replace the client that still holds one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from runtime import get_logger

log = get_logger("offsetsync")

# Group requests on a healthy cluster take milliseconds; a cycle stuck on one fails soon, and
# failed cycles in a row make the clients anew (offsetsync.clients).
TIMEOUT_S = 10.0
# librdkafka's maximum: it never times a coordinator request out itself (the module's note).
COORDINATOR_REQUEST_TIMEOUT_S = 3600.0


class AdminSession:
    """The current admin client of one cluster (``new_admin`` makes one); only a replaced
    client may hold an unanswered request."""

    def __init__(self, new_admin: Callable[[], AdminClient]) -> None:
        self._new_admin = new_admin
        self.admin = new_admin()
        # Replaced clients, destroyed by ``release`` or the next ``answers``: destroying one
        # can take a while, and must not delay the answers already in hand.
        self._retired: list[AdminClient] = []

    def answers(
        self, futures: Mapping[str, Future[Any]], timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Each request's result, the KafkaException it failed with, or a TimeoutError if it
        went unanswered for ``timeout_s`` (TIMEOUT_S by default; one deadline for all of them).

        A client that holds an unanswered request is replaced: destroying it fails such a
        request without sending it (librdkafka's own clean-up, which is safe)."""
        self.release()
        deadline = time.monotonic() + (TIMEOUT_S if timeout_s is None else timeout_s)
        answers: dict[str, Any] = {}
        try:
            for key, future in futures.items():
                try:
                    answers[key] = future.result(timeout=max(0.0, deadline - time.monotonic()))
                except (KafkaException, TimeoutError) as exc:
                    answers[key] = exc
        finally:
            unanswered = sum(not future.done() for future in futures.values())
            if unanswered:
                log.warning(
                    "group requests unanswered: their admin client is made anew",
                    unanswered=unanswered,
                    timeout_s=TIMEOUT_S if timeout_s is None else round(timeout_s, 1),
                )
                self._retired.append(self.admin)
                self.admin = self._new_admin()
        return answers

    def release(self) -> None:
        """Destroy the clients replaced so far."""
        self._retired.clear()
