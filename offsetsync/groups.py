"""Consumer groups of one cluster: which exist and whether they have members, their committed
offsets (and which of them the cluster could not tell this cycle), and committing new ones."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from offsetsync.admin_session import COORDINATOR_REQUEST_TIMEOUT_S, TIMEOUT_S, AdminSession
from offsetsync.offset_fetch import Committed, GroupOffsetFetch, OffsetFetchProcess
from offsetsync.reading import Key
from runtime import (
    LIBRDKAFKA_LOG,
    ErrorClass,
    RetriableKafkaError,
    call_retrying,
    classify,
    get_logger,
    kafka_error_of,
    translate_kafka_errors,
)

log = get_logger("offsetsync")

# The key of the listing among AdminSession.answers' requests (every other key is a group).
_LISTING = "(the group listing)"
# Groups without members. Any other state (stable, rebalancing, assigning, reconciling; classic
# or KIP-848 groups alike) has members whose position we must not move.
_IDLE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})
# What the broker answers when offsets are committed from outside for a group that has members:
# it refuses, so a member that joined after we looked is never overridden either.
GROUP_ACTIVE = frozenset({KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS})
# Groups not listed that the fetching process did not answer, read at once, each by a consumer
# of its own (``committed_unlisted``). A first cycle meets every group unlisted on a target it
# has not synced yet: one consumer after another, at 2,000 groups it took minutes.
_UNLISTED_AT_ONCE = 16


# The metadata of every offset offset sync commits: a position it translated from another
# cluster, not one a consumer reached. Offset sync never translates such an offset onwards, so
# that two flows in opposite directions (active-active) never move a group back and forth.
TRANSLATED_MARK = "exactly.offsetsync"


def translated_metadata(source_cluster_id: str) -> str:
    return f"{TRANSLATED_MARK} from {source_cluster_id}"


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """A group's committed offsets as the cluster told them in one fetch."""

    offsets: dict[Key, int]  # partitions with a committed offset
    # Partitions the cluster did not say anything certain about: an offset commit of an open
    # transaction is pending on them (UNSTABLE_OFFSET_COMMIT), or the whole fetch failed. Not
    # "no offset": nothing may be decided on them this cycle.
    unknown: frozenset[Key] = frozenset()
    # Partitions (among ``offsets``) whose offset an offset sync committed (TRANSLATED_MARK).
    translated: frozenset[Key] = frozenset()


class ClusterGroups:
    """The groups of one cluster: listed and committed through admin clients of its own
    (AdminSession: replaced at once when a coordinator request goes unanswered), their
    offsets fetched by a process of its own (``fetch``: offsetsync.offset_fetch)."""

    def __init__(
        self,
        new_admin: Callable[[], AdminClient],
        client_config: Mapping[str, str],
        fetch: OffsetFetchProcess | GroupOffsetFetch,
        *,
        connections: int = 1,
    ) -> None:
        # A broker answers one connection's requests one after another: a cycle's commits
        # overlap only across clients (AdminSession's note).
        self._session = AdminSession(new_admin, connections=connections)
        self._client_config = client_config
        self._fetch = fetch

    def serve_callbacks(self) -> None:
        """Deliver its admin clients' queued statistics (its requests metric)."""
        self._session.poll()

    def close(self) -> None:
        self._fetch.close()

    def states(self) -> dict[str, ConsumerGroupState]:
        """Every group the cluster lists, with its state: one request per broker.

        A listing can leave out a group that exists, with no error: a group whose coordinator
        is loading or moving between brokers. Absent from it is not "no offsets"
        (``committed_unlisted``)."""
        # Our own deadline as for the coordinator requests: a listing whose broker left the
        # cluster while it waited was never answered nor timed out by librdkafka (three nodes,
        # a target node SIGKILLed: offset sync stood still for minutes, silent), while its own
        # timeout answers first in every other case.
        future = self._session.admin.list_consumer_groups(request_timeout=TIMEOUT_S - 2)
        listing = self._session.answers({_LISTING: future})[_LISTING]
        if isinstance(listing, TimeoutError):
            raise KafkaException(
                KafkaError(
                    KafkaError._TIMED_OUT, f"group listing not answered in {TIMEOUT_S:.0f} s"
                )
            )
        if isinstance(listing, KafkaException):
            raise listing
        if listing.errors:
            # A broker that did not answer may coordinate a group: a partial list would make
            # that group look absent (free to move, or gone from the source).
            raise KafkaException(listing.errors[0])
        return {group.group_id: group.state for group in listing.valid}

    def committed(self, groups: Iterable[str]) -> dict[str, GroupOffsets]:
        """The committed offsets of each group. Only stable offsets: a transactional commit still
        in flight is not an offset yet, and its partitions are ``unknown``. A group whose fetch
        failed is left out: its offsets are unknown this cycle.

        Pass only groups that ``states()`` listed (the others: ``committed_unlisted``): a
        group left out is "unknown", which an unlisted group must not be for want of an answer.
        """
        offsets = {}
        for group, answer in self._fetch.fetch(groups).items():
            if isinstance(answer, TimeoutError):
                log.info("group offsets not fetched this cycle", group=group, error=str(answer))
                continue
            if isinstance(answer, KafkaException):
                # One group's fetch failing (a transactional commit of it pending, its
                # coordinator loading) leaves that group out of this cycle, not every group.
                if classify(kafka_error_of(answer)) is not ErrorClass.RETRIABLE:
                    raise answer
                log.info("group offsets not fetched this cycle", group=group, error=str(answer))
                continue
            offsets[group] = _group_offsets(group, answer)
        return offsets

    def committed_unlisted(self, wanted: Mapping[str, Collection[Key]]) -> dict[str, GroupOffsets]:
        """The committed offsets on its partitions of each group that ``states()`` did not
        list. First asked of the fetching process with every group at once, as listed groups
        are (200 never-seen groups answered in 0.4-1.1 s on a cluster whose coordinators are
        loaded). Each group it did not answer, or every group when the process was lost (a
        coordinator moving, or none loaded yet on a new cluster: librdkafka #5040), is asked
        by a consumer of its own (``_committed_unlisted``), _UNLISTED_AT_ONCE at a time."""
        found = {
            group: _group_offsets(group, answer)
            for group, answer in self._fetch.fetch(wanted).items()
            if isinstance(answer, list)
        }
        rest = {group: keys for group, keys in wanted.items() if group not in found}
        if not rest:
            return found
        # Said once a call (a cycle's step): a process lost on these groups logged that their
        # offsets were unknown, and they are not left so.
        log.info("groups not listed read by consumers of their own", groups=len(rest))
        workers = min(_UNLISTED_AT_ONCE, len(rest))
        pool = ThreadPoolExecutor(workers, thread_name_prefix="offsetsync-unlisted")
        try:
            futures = {
                group: pool.submit(self._committed_unlisted, group, partitions)
                for group, partitions in rest.items()
            }
            # A fatal error of any group raises here, as it did when read one after another,
            # and the groups not yet begun are not read.
            return found | {group: future.result() for group, future in futures.items()}
        finally:
            pool.shutdown(cancel_futures=True)

    def _committed_unlisted(self, group: str, partitions: Collection[Key]) -> GroupOffsets:
        """The committed offsets on ``partitions`` of a group that ``states()`` did not list;
        every partition ``unknown`` when the cluster did not answer in time.

        Not the admin client, which the fetching process could not use for it. A consumer of the
        group asks the group's coordinator the same (OffsetFetch, stable offsets only under
        read_committed) through its own coordinator handling, which survives NOT_COORDINATOR;
        it never subscribes, so it never joins the group and never commits."""
        consumer = Consumer(
            {
                **self._client_config,
                "group.id": group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "logger": LIBRDKAFKA_LOG,
            }
        )
        wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
        try:
            with translate_kafka_errors("committed offsets of a group not listed"):
                # NOT_COORDINATOR is raised, not crashed on, here: on a cluster that has never
                # seen a group, the first answers while __consumer_offsets is made and loaded.
                found = call_retrying(
                    lambda: consumer.committed(wanted, timeout=TIMEOUT_S),
                    deadline_s=TIMEOUT_S,
                )
        except RetriableKafkaError as exc:
            # A transaction holding offsets of the group open, or its coordinator away: librdkafka
            # asked again until the timeout.
            log.info("group offsets not fetched this cycle", group=group, error=str(exc))
            return GroupOffsets({}, frozenset(partitions))
        finally:
            consumer.close()
        return _group_offsets(group, [Committed.of(tp) for tp in found])

    def commit(
        self, offsets: Mapping[str, Mapping[Key, int]], metadata: str
    ) -> dict[str, dict[Key, KafkaError | None]]:
        """Commit each group's offsets, each with ``metadata``; the outcome per partition
        (None: committed)."""
        admins = self._session.spread()
        futures = {
            group: next(admins).alter_consumer_group_offsets(
                [
                    ConsumerGroupTopicPartitions(
                        group,
                        [
                            TopicPartition(t, p, offset, metadata=metadata)
                            for (t, p), offset in moves.items()
                        ],
                    )
                ],
                request_timeout=COORDINATOR_REQUEST_TIMEOUT_S,
            )[group]
            for group, moves in offsets.items()
        }
        outcomes: dict[str, dict[Key, KafkaError | None]] = {}
        for group, answer in self._session.answers(futures).items():
            if isinstance(answer, TimeoutError):
                # Not committed by us: the admin client that held the request is gone, and the
                # request with it unless it had reached the broker already (as any timeout).
                unanswered = KafkaError(
                    KafkaError._TIMED_OUT, f"offset commit not answered in {TIMEOUT_S:.0f} s"
                )
                outcomes[group] = dict.fromkeys(offsets[group], unanswered)
            elif isinstance(answer, KafkaException):
                outcomes[group] = dict.fromkeys(offsets[group], kafka_error_of(answer))
            else:
                outcomes[group] = {
                    (tp.topic, tp.partition): tp.error for tp in answer.topic_partitions
                }
        return outcomes


def _group_offsets(group: str, found: Iterable[Committed]) -> GroupOffsets:
    offsets, unknown, translated, errors = {}, set(), set(), set()
    for tp in found:
        key = (tp.topic, tp.partition)
        if tp.metadata and tp.metadata.startswith(TRANSLATED_MARK):
            translated.add(key)
        if tp.error is not None:
            # Per partition, not raised: UNSTABLE_OFFSET_COMMIT while a transaction that
            # commits offsets of this group is open (seen here on Kafka 4.3.1 with
            # require_stable). Dropping the partition would make it look as if it had none.
            unknown.add(key)
            errors.add(tp.error)
        elif tp.offset >= 0:
            offsets[key] = tp.offset
    if unknown:
        log.info(
            "group offsets of some partitions not fetched this cycle",
            group=group,
            partitions=len(unknown),
            errors=",".join(sorted(errors)),
        )
    return GroupOffsets(offsets, frozenset(unknown), frozenset(translated & offsets.keys()))


def is_idle(state: ConsumerGroupState | None) -> bool:
    """No members: a group absent from the cluster (None) is idle too."""
    return state is None or state in _IDLE
