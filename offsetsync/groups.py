"""Consumer groups of one cluster through the admin API: which exist and whether they have
members, their committed offsets, and committing new ones."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from offsetsync.reading import Key
from runtime import ErrorClass, classify, get_logger

log = get_logger("offsetsync")

# Group requests on a healthy cluster take milliseconds; a cycle stuck on one fails soon, and
# failed cycles in a row make the clients anew (offsetsync.clients).
_TIMEOUT_S = 10.0
# Groups without members. Any other state (stable, rebalancing, assigning, reconciling; classic
# or KIP-848 groups alike) has members whose position we must not move.
_IDLE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})
# What the broker answers when offsets are committed from outside for a group that has members:
# it refuses, so a member that joined after we looked is never overridden either.
GROUP_ACTIVE = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS})


class ClusterGroups:
    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin

    def states(self) -> dict[str, ConsumerGroupState]:
        """Every group the cluster knows, with its state: one request per broker."""
        listing = self._admin.list_consumer_groups(request_timeout=_TIMEOUT_S).result()
        if listing.errors:
            # A broker that did not answer may coordinate a group: a partial list would make
            # that group look absent (free to move, or gone from the source).
            raise KafkaException(listing.errors[0])
        return {group.group_id: group.state for group in listing.valid}

    def committed(self, groups: Iterable[str]) -> dict[str, dict[Key, int]]:
        """The committed offsets of each group (a partition with none is left out). Only stable
        offsets: a transactional commit still in flight is not an offset yet.

        Pass only groups that ``states()`` listed. librdkafka's admin client crashes the process
        (SIGSEGV, librdkafka #5040, open) when an offset fetch is answered NOT_COORDINATOR: it
        asks a consumer-group handler the admin client does not have to find the coordinator
        again. A group the cluster has never seen is the common trigger (its coordinator is
        still loading); a coordinator moving between brokers is the other, and then the
        process dies and restarts: nothing is committed from a cycle that did not finish.
        """
        futures = {
            group: self._admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)],
                require_stable=True,
                request_timeout=_TIMEOUT_S,
            )[group]
            for group in groups
        }
        offsets = {}
        for group, future in futures.items():
            try:
                found = future.result()
            except KafkaException as exc:
                # One group's fetch failing (a transactional commit of it pending, its
                # coordinator loading) leaves that group out of this cycle, not every group.
                if classify(exc.args[0]) is not ErrorClass.RETRIABLE:
                    raise
                log.info("group offsets not fetched this cycle", group=group, error=str(exc))
                continue
            offsets[group] = {
                (tp.topic, tp.partition): tp.offset
                for tp in found.topic_partitions
                if tp.error is None and tp.offset >= 0
            }
        return offsets

    def commit(
        self, offsets: Mapping[str, Mapping[Key, int]]
    ) -> dict[str, dict[Key, KafkaError | None]]:
        """Commit each group's offsets; the outcome per partition (None: committed)."""
        futures = {
            group: self._admin.alter_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        group, [TopicPartition(t, p, offset) for (t, p), offset in moves.items()]
                    )
                ],
                request_timeout=_TIMEOUT_S,
            )[group]
            for group, moves in offsets.items()
        }
        outcomes: dict[str, dict[Key, KafkaError | None]] = {}
        for group, future in futures.items():
            try:
                result = future.result()
            except KafkaException as exc:
                outcomes[group] = dict.fromkeys(offsets[group], exc.args[0])
                continue
            outcomes[group] = {(tp.topic, tp.partition): tp.error for tp in result.topic_partitions}
        return outcomes


def is_idle(state: ConsumerGroupState | None) -> bool:
    """No members: a group absent from the cluster (None) is idle too."""
    return state is None or state in _IDLE
