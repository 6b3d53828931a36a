"""Which source topics stage 1 replicates, found anew every few seconds, and the policy for a
source topic deleted and recreated under its name (invariant 7: reported, never silently re-read
from its start nor skipped).

A topic is taken in only once its destination exists with the source's partition count (the
destination's partitions are the source's: stage 2 writes each record to its own partition).
Every round checks the destination names of all the matching topics together. A topic whose
destination name is another's (or one of the flow's own topics') is never copied: a topic the
flow has replicated keeps its name and goes on being copied, and a topic made later under a
clashing name is left out (an error line when it is first met, ``left_out`` for the gauge while it
lasts, and a record in the flow's meta topic) until the settings or the topics change. At
start-up a collision the flow has not met before is the settings' error (a new rename, a fresh
flow): stage 1 stops with DestinationCollisionError, exit 2, one line. One it has met (its
newcomer recorded as left out) is not: the restart goes on copying the others.
"""

from __future__ import annotations

from collections.abc import Collection

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from replicator.errors import ReplicatorError
from replicator.flowrecords import FlowRecords
from replicator.topics import SourceTopic, describe_source_topics, ensure_destination
from runtime import ExactlyError, NotAuthorizedError, Settings, get_logger, kafka_error_of
from runtime.errors import AuthenticationError, DestinationCollisionError

log = get_logger(__name__)


class TopicDiscovery:
    def __init__(
        self,
        settings: Settings,
        records: FlowRecords,
        source_admin: AdminClient,
        target_admin: AdminClient,
    ) -> None:
        self._settings = settings
        self._records = records
        self._source_admin = source_admin
        self._target_admin = target_admin
        self.topics: dict[str, SourceTopic] = {}
        # Source topics deleted and recreated under their name, held back by policy: old id, new.
        self.recreated: dict[str, tuple[str, str]] = {}
        # Source topics not copied as their destination name collides: topic -> why.
        self.left_out: dict[str, str] = {}
        self._looked = False

    def refresh(self, running: Collection[str]) -> bool:
        """Describe the source again; False (and the last answer kept) when it cannot be read.

        ``running``: the topics with assigned partitions, whose recreation under the policy
        ``replicate`` ends the process (ReplicatorError) so that its restart starts clean.
        Two topics with one destination name end it at start-up only, when the flow has not met
        that collision before (DestinationCollisionError); afterwards the newcomer is left out.
        """
        # Serves the admin clients' error callbacks (runtime.clients.RoleAdminClient), which
        # queue until a poll: every few seconds, not only while a start-up call fails.
        self._source_admin.poll(0)
        self._target_admin.poll(0)
        try:
            found = self._describe()
        except KafkaException as exc:
            log.warning("topic discovery failed", error=kafka_error_of(exc).str())
            return False
        for name, topic in list(found.items()):
            known = self.topics.get(name)
            if known is None or known.partitions != topic.partitions:
                try:
                    ensure_destination(self._target_admin, topic)
                except (NotAuthorizedError, AuthenticationError):
                    raise  # no later round mends a missing ACL or refused credentials
                except (KafkaException, ExactlyError) as exc:
                    log.warning("destination topic not ready; retrying", topic=name, error=str(exc))
                    found.pop(name)
                    if known is not None:
                        found[name] = known
                    continue
            self._check_topic_id(topic, running=name in running)
        self.topics = found
        return True

    def describe(self, names: Collection[str]) -> None:
        """Learn topics assigned before discovery saw them (a rebalance can be first)."""
        if any(name not in self.topics for name in names):
            self.topics.update(self._describe())

    def _describe(self) -> dict[str, SourceTopic]:
        recorded = self._records.left_out_topics()
        left_out: dict[str, str] = {}

        def leave_out(topic: str, error: DestinationCollisionError) -> None:
            # At start-up the settings are what is new: a collision not met before is their
            # error. Once running (or one met before), the newcomer must not stop the others:
            # the restart would meet it again, a crash loop that copies nothing.
            if not self._looked and topic not in recorded:
                raise error
            left_out[topic] = str(error)

        found = describe_source_topics(
            self._source_admin,
            self._settings,
            established=self._records.replicated_topics(),
            left_out=leave_out,
        )
        self._looked = True
        for topic, why in left_out.items():
            if self.left_out.get(topic) != why:
                log.error(
                    "source topic not replicated: its destination name collides",
                    topic=topic,
                    error=why,
                )
            if topic not in recorded:
                self._records.record_left_out(topic, why)
        self.left_out = left_out
        return found

    def recreated_detail(self, topic: str) -> str | None:
        """Why ``topic``'s partitions stay stopped, or None when they may run."""
        if topic not in self.recreated:
            return None
        old, new = self.recreated[topic]
        return f"source topic id changed {old} -> {new}: deleted and recreated"

    def _check_topic_id(self, topic: SourceTopic, *, running: bool) -> None:
        current = topic.topic_id.hex()
        recorded = self._records.topic_id(topic.name)
        if recorded == current:
            return
        replicate = self._settings.on_topic_recreated == "replicate"
        if recorded is not None and running and replicate:
            # Running lanes hold the old topic's id and positions: a restart starts the new
            # topic cleanly (its committed offsets went with the old one).
            self._records.record_topic_id(topic.name, current)
            raise ReplicatorError(
                f"source topic {topic.name} was deleted and recreated while replicated; "
                "exiting so that the restart replicates the new one (policy replicate)"
            )
        if recorded is None or replicate:
            if recorded is not None:
                log.warning(
                    "source topic was deleted and recreated; replicating the new one by policy",
                    topic=topic.name,
                    old_topic_id=recorded,
                    topic_id=current,
                )
            self._records.record_topic_id(topic.name, current)
            self.recreated.pop(topic.name, None)
            return
        if topic.name not in self.recreated:
            log.error(
                "source topic was deleted and recreated; its partitions stay stopped "
                "(REPLICATION_ON_TOPIC_RECREATED=replicate goes on with the new one)",
                topic=topic.name,
                old_topic_id=recorded,
                topic_id=current,
            )
        self.recreated[topic.name] = (recorded, current)
