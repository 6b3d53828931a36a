"""Admin clients asked with our own deadline, and replaced when a request to a group's
coordinator goes unanswered (librdkafka #4605).

librdkafka 2.16 aborts the process (rd_kafka_enq_once_del_source_return: Assertion
`eonce->refcnt > 0', librdkafka #4605, open) when it times out a coordinator request while it is
still looking for the coordinator (FindCoordinator unanswered or not yet possible, the
coordinator's connection down) and the coordinator turns up later in the same client: the lookup
then goes on through a reference the timeout freed. Reproduced here whenever the coordinator
came back while the client lived: a broker frozen for 3 s (1 s timeout), a coordinator node
SIGKILLed on three nodes (10 s), a broker restarted (5 s). So librdkafka is given its maximum
request timeout (COORDINATOR_REQUEST_TIMEOUT_S) and never times such a request out itself; we
wait by TIMEOUT_S and replace the clients when one still holds one.

A session may hold several clients (``connections``), each with its connection to every broker,
and spread one cycle's group requests over them: a broker reads the next request of a
connection only once it has answered the one before, so the requests of one client wait on each
other however many are in flight. 2,000 offset fetches of one idle broker took 0.95-1.4 s
through one client, 0.65-0.9 s through four; a cycle of 2,000 groups under load, 6.8-10.5 s
instead of 13.2-14.1 s (docs/performance.md, "spread over four clients").
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
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
# The clients a cycle's group requests (offset fetches, offset commits) of one cluster are
# spread over (the module's note): 1 to 16 measured; beyond four the gain was small (eight made
# no shorter cycle of offset sync at 2,000 groups), and each client keeps a connection and a
# thread per broker.
GROUP_CONNECTIONS = 4


class AdminSession:
    """The current admin clients of one cluster (``new_admin`` makes one; ``connections`` of
    them); only a replaced client may hold an unanswered request."""

    def __init__(self, new_admin: Callable[[], AdminClient], *, connections: int = 1) -> None:
        if connections < 1:
            raise ValueError(f"an admin session needs a client at least, not {connections}")
        self._new_admin = new_admin
        self._admins = [new_admin() for _ in range(connections)]
        # Replaced clients, destroyed by ``release`` or the next ``answers``: destroying one
        # can take a while, and must not delay the answers already in hand.
        self._retired: list[AdminClient] = []

    @property
    def admin(self) -> AdminClient:
        """The client for a single request (a listing)."""
        return self._admins[0]

    def spread(self) -> Iterator[AdminClient]:
        """Every client in turn, endlessly: one for each of a batch of requests."""
        return itertools.cycle(self._admins)

    def poll(self) -> None:
        """Serve every client's queued callbacks (statistics, log lines)."""
        for admin in self._admins:
            admin.poll(0)

    def answers(
        self, futures: Mapping[str, Future[Any]], timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Each request's result, the KafkaException it failed with, or a TimeoutError if it
        went unanswered for ``timeout_s`` (TIMEOUT_S by default; one deadline for all of them).

        The clients are replaced when one holds an unanswered request (which one is not
        known): destroying a client fails such a request without sending it (librdkafka's own
        clean-up, which is safe)."""
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
                    "group requests unanswered: their admin clients are made anew",
                    unanswered=unanswered,
                    timeout_s=TIMEOUT_S if timeout_s is None else round(timeout_s, 1),
                )
                self._retired.extend(self._admins)
                self._admins = [self._new_admin() for _ in self._admins]
        return answers

    def release(self) -> None:
        """Destroy the clients replaced so far."""
        self._retired.clear()
