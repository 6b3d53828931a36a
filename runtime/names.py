"""Every Kafka name derived from a flow, built here and nowhere else.

A flow (``APPLICATION_NAME``, or ``REPLICATION_FLOW``) owns, on the target cluster:

    __exactly.<flow>.staging        stage 1 writes envelopes, stage 2 reads them (overridable)
    <staging>.meta                  what the flow remembers: lane mapping, topic generations
    __exactly.<flow>.changelog      stage 2's deduplication state, compacted
    __exactly.<flow>.deadletter     staging records stage 2 could not read
    __exactly.<flow>.checkpoints    offset sync's translations, one per group and partition

and these client identities (``exactly.<flow>.<role>``, the same pattern for each):

    exactly.<flow>.replicator                 stage 1's consumer group on the source
    exactly.<flow>.deduplicator               stage 2's consumer group on staging
    exactly.<flow>.meta-reader                reads <staging>.meta at start-up
    exactly.<flow>.changelog-reader           restores stage 2's state
    exactly.<flow>.deduplicator.<instance>    stage 2's transactional.id
    exactly.<flow>.<role>.<instance>          group.instance.id (static membership)

Two flows share a cluster without sharing one of these names; renaming one breaks the flow's
continuity (a new staging topic, a new group that starts over), so the patterns never change.
"""

from __future__ import annotations

from dataclasses import dataclass

_TOPIC_PREFIX = "__exactly"  # internal topics: hidden from tools that hide "__" topics
_CLIENT_PREFIX = "exactly"


@dataclass(frozen=True)
class FlowNames:
    flow: str
    staging_override: str | None = None

    def _topic(self, what: str) -> str:
        return f"{_TOPIC_PREFIX}.{self.flow}.{what}"

    def _client(self, *parts: str) -> str:
        return ".".join((_CLIENT_PREFIX, self.flow, *parts))

    @property
    def staging(self) -> str:
        return self.staging_override or self._topic("staging")

    @property
    def meta(self) -> str:
        return f"{self.staging}.meta"

    @property
    def changelog(self) -> str:
        return self._topic("changelog")

    @property
    def deadletter(self) -> str:
        return self._topic("deadletter")

    @property
    def checkpoints(self) -> str:
        return self._topic("checkpoints")

    @property
    def topics(self) -> dict[str, str]:
        """Every topic of the flow, by what it is (``staging``, ``meta``, ...): no replicated
        topic may be copied to one of them."""
        return {
            "staging": self.staging,
            "meta": self.meta,
            "changelog": self.changelog,
            "deadletter": self.deadletter,
            "checkpoints": self.checkpoints,
        }

    @property
    def replicator_group(self) -> str:
        return self._client("replicator")

    @property
    def deduplicator_group(self) -> str:
        return self._client("deduplicator")

    @property
    def meta_reader_group(self) -> str:
        return self._client("meta-reader")

    @property
    def changelog_reader_group(self) -> str:
        return self._client("changelog-reader")

    def deduplicator_transactional_id(self, instance: str) -> str:
        return self._client("deduplicator", instance)

    def group_instance_id(self, role: str, instance: str) -> str:
        return self._client(role, instance)
