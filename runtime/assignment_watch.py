"""Saying so when a subscribed consumer is given no partition for long.

librdkafka keeps asking for a group it cannot join without a word above its debug level. A
consumer on KIP-848's protocol (``group.protocol=consumer``) whose brokers lack it (Kafka
before 4.0, or a cluster where the protocol is not enabled) is the case met in practice: the
stage starts, reports ready, subscribes, and copies nothing, with no error to find. Both
stages join their group with a static member id (runtime.role.static_membership), so a
restarted instance has its partitions back within seconds; one that has none after
`UNASSIGNED_WARN_S` is stuck, and the line says which group and the likely cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.logs import get_logger

log = get_logger(__name__)

# Far beyond a static member's rejoin and the broker's initial rebalance delay (3 s), short
# enough that a user watching a new flow's first start sees the line.
UNASSIGNED_WARN_S = 30.0

_PROTOCOL_HINT = (
    "group.protocol=consumer needs brokers with KIP-848's consumer group protocol (Kafka 4.0 "
    "or later); librdkafka retries in silence on others: drop the property or upgrade"
)
_CLASSIC_HINT = "other members of the group may hold every partition"


class AssignmentWatch:
    """Warns once per wait when a subscribed consumer has held no partition for ``after_s``,
    and says when partitions come at last. The owning loop reports its subscriptions and how
    many partitions it holds after each assignment change, and calls `check` as it goes."""

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
        self._hint = _PROTOCOL_HINT if consumer_group_protocol else _CLASSIC_HINT
        self._after_s = after_s
        self._clock = clock
        self._since: float | None = None  # waiting for a partition since; None: not waiting
        self._warned = False

    def subscribed(self, held: int) -> None:
        if held == 0 and self._since is None:
            self._since = self._clock()

    def unsubscribed(self) -> None:
        # Nothing to be given: no wait to report.
        self._since = None
        self._warned = False

    def held(self, count: int) -> None:
        if count == 0:
            self.subscribed(0)
            return
        if self._warned and self._since is not None:
            log.info(
                "partitions assigned after a long wait",
                consumer=self._consumer,
                group=self._group,
                waited_s=round(self._clock() - self._since, 1),
            )
        self.unsubscribed()

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
