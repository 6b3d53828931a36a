"""Source topics stage 1 took in that the naming settings now give a destination they may not
have: one another topic taken in has too, or one of the flow's own or Kafka's internal names
(a later change of the rename, the template or the flow's names; docs/design.md §5).

Stage 1 stops on such settings (exit 2, runtime/topic_naming.py), and a shared destination
holds the copies of one of the topics at most; which one is not recorded. The provenance header
names a cluster, partition and offset, not a topic: another topic's groups, translated, would
be moved onto those copies. So none of them is translated while the collision lasts. Only
topics the source has take part, as in stage 1's look: once all but one are deleted, stage 1
copies that one into the destination and its groups are translated again; a deleted topic's
groups, whose offsets the source may still hold for a while, stay held back while a topic on the
source has its destination.
"""

from __future__ import annotations

from collections.abc import Collection

from runtime import Settings, get_logger
from runtime.errors import DestinationCollisionError
from runtime.settings import destination_names

log = get_logger("offsetsync")


class Collisions:
    """Which topics are held back for a collision, each warned about once while it lasts."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._warned: set[str] = set()
        self._met: set[str] = set()  # this cycle's

    def related(self, topics: Collection[str], taken_in: Collection[str]) -> set[str]:
        """``topics`` and each topic of ``taken_in`` the settings now give the destination of
        one of them: what must be looked up on the source to tell a collision."""
        wanted = {destination_or_none(self._settings, topic) for topic in topics} - {None}
        return set(topics) | {
            t for t in taken_in if destination_or_none(self._settings, t) in wanted
        }

    def held_back(self, topics: Collection[str], on_source: Collection[str]) -> set[str]:
        """Among ``topics`` (stage 1 took them in), those whose destination a topic of
        ``on_source`` (taken in as well, on the source now) also has, or that is the flow's own
        or an internal one."""
        live = set(on_source)
        why = _colliding(self._settings, live)
        for topic in set(topics) - live:  # gone from the source: against those still there
            alone = _colliding(self._settings, live | {topic})
            if topic in alone:
                why[topic] = alone[topic]
        held = {topic for topic in topics if topic in why}
        for topic in sorted(held - self._warned):
            log.warning(
                "source topic stage 1 took in now has a destination it may not have (the "
                "naming settings changed): groups' offsets on it are not synced",
                topic=topic,
                destination=destination_or_none(self._settings, topic),
                error=why[topic],
            )
        for topic in sorted((self._warned & set(topics)) - held):
            log.info("source topic's destination collides no more", topic=topic)
        self._warned = (self._warned - set(topics)) | held
        self._met |= held
        return held

    def cycle_started(self) -> None:
        self._met = set()

    def cycle_ended(self) -> None:
        """One no group has offsets on any more is forgotten: met again, it is warned anew."""
        self._warned &= self._met


def destination_or_none(settings: Settings, topic: str) -> str | None:
    """``topic``'s destination name, or None when it has none or no valid one."""
    try:
        return settings.destination_topic(topic)
    except ValueError:  # no valid destination name: not replicated (warned where it is met)
        return None


def _colliding(settings: Settings, topics: Collection[str]) -> dict[str, str]:
    """Each of ``topics`` runtime's naming rule leaves out when none of them has a claim the
    others lack, with why: every topic of a shared destination, and one named as the flow's own
    or an internal topic."""
    why: dict[str, str] = {}

    def left_out(topic: str, error: DestinationCollisionError) -> None:
        why.setdefault(topic, str(error))

    destination_names(
        settings, sorted(topics), invalid=lambda _topic, _error: None, left_out=left_out
    )
    return why
