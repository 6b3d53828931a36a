"""Saying so when a subscribed consumer is given no partition for long.

librdkafka keeps asking for a group it cannot join without a word above its debug level. A
consumer on KIP-848's protocol (``group.protocol=consumer``) whose brokers lack it (Kafka
before 4.0, or a cluster where the protocol is not enabled) is the case met in practice: the
stage starts, reports ready, subscribes, and copies nothing, with no error to find. Both
stages join their group with a static member id (runtime.role.static_membership), so a
restarted instance has its partitions back within seconds; one given none for
`UNASSIGNED_WARN_S` from its subscription on is stuck or idle, and the line says which group and
the likely causes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.logs import get_logger

log = get_logger(__name__)

# Past a static member's rejoin and the broker's initial rebalance delay (3 s), and past the
# session timeout (45 s by default) an instance under a new group.instance.id waits out for the
# partitions its predecessor held; short enough that a user watching a flow's start sees it.
UNASSIGNED_WARN_S = 60.0

_OTHERS_HOLD = "other members of the group may hold every partition, or a rebalance is slow"
_PROTOCOL_HINT = (
    "group.protocol=consumer needs brokers with KIP-848's consumer group protocol (Kafka 4.0 "
    "or later), and librdkafka retries in silence on others: drop the property or upgrade; "
    f"else {_OTHERS_HOLD}"
)


class AssignmentWatch:
    """Warns once when a consumer, from its subscription on, has been given no partition for
    ``after_s``, and says when partitions come at last. Only a start with nothing is watched:
    a consumer that held partitions and lost them in a rebalance was served by its group. The
    owning loop reports its subscriptions and each assignment as it begins (before any restore,
    which is not waiting for the group), and calls `check` as it goes."""

    def __init__(
        self,
        consumer: str,
        group: str,
        *,
        consumer_group_protocol: bool,
        after_s: float = UNASSIGNED_WARN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._group = group
        self._hint = _PROTOCOL_HINT if consumer_group_protocol else _OTHERS_HOLD
        self._after_s = after_s
        self._clock = clock
        self._since: float | None = None  # waiting for a first partition since; None: not
        self._warned = False

    def subscribed(self, held: int) -> None:
        if held == 0 and self._since is None:
            self._since = self._clock()

    def unsubscribed(self) -> None:
        self._end_wait()  # nothing to be given: no wait to report

    def given(self, count: int) -> None:
        if count == 0 or self._since is None:
            return
        if self._warned:
            log.info(
                "partitions assigned after a long wait",
                consumer=self._consumer,
                group=self._group,
                waited_s=round(self._clock() - self._since, 1),
            )
        self._end_wait()

    def _end_wait(self) -> None:
        self._since = None
        self._warned = False

    def check(self) -> None:
        if self._since is None or self._warned:
            return
        waited = self._clock() - self._since
        if waited >= self._after_s:
            self._warned = True
            log.warning(
                "subscribed but given no partition",
                consumer=self._consumer,
                group=self._group,
                waited_s=round(waited, 1),
                hint=self._hint,
            )
