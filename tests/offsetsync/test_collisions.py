"""Which topics stage 1 took in offset sync holds back when the naming settings now give them a
destination they may not have (offsetsync/collisions.py): pure logic over the settings and the
topics on the source. The same case against real Kafka, records and groups:
tests/offsetsync/test_left_out.py."""

from __future__ import annotations

import logging

import pytest

from offsetsync.collisions import Collisions
from runtime import Settings, load_settings


def _settings(**extra: str) -> Settings:
    # Nothing is asked of these clusters: the settings only name the topics.
    return load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:2",
            "REPLICATION_FLOW": "collide",
            "REPLICATION_TOPICS_INCLUDE": r"shop\..*",
            # `shop.old` and `shop.legacy` are both given `shop.orders`' destination.
            "REPLICATION_TOPICS_RENAME_PATTERN": r"shop\.(old|legacy)",
            "REPLICATION_TOPICS_RENAME_REPLACEMENT": "shop.orders",
            **extra,
        }
    )


@pytest.fixture
def collisions() -> Collisions:
    return Collisions(_settings())


def test_two_topics_on_the_source_with_one_destination_are_both_held_back(collisions):
    on_source = {"shop.orders", "shop.old", "shop.items"}
    assert collisions.held_back({"shop.orders", "shop.items"}, on_source) == {"shop.orders"}
    assert collisions.held_back({"shop.old"}, on_source) == {"shop.old"}


def test_three_topics_with_one_destination_are_all_held_back(collisions):
    on_source = {"shop.orders", "shop.old", "shop.legacy"}
    assert collisions.held_back(on_source, on_source) == on_source


def test_a_topic_whose_partner_left_the_source_is_translated_again(collisions):
    assert collisions.held_back({"shop.orders"}, {"shop.orders"}) == set()


def test_a_topic_gone_from_the_source_is_held_back_while_one_there_has_its_destination(
    collisions,
):
    # Its groups' offsets may outlive it a while; the destination then fills with the other's.
    assert collisions.held_back({"shop.old"}, {"shop.orders"}) == {"shop.old"}
    assert collisions.held_back({"shop.old"}, set()) == set()


def test_a_topic_given_an_internal_topic_s_name_is_held_back():
    settings = _settings(REPLICATION_DESTINATION_TOPIC="__{topic}")
    assert Collisions(settings).held_back({"shop.items"}, {"shop.items"}) == {"shop.items"}


def test_related_names_the_topics_taken_in_that_share_a_destination(collisions):
    taken_in = {"shop.orders", "shop.old", "shop.legacy", "shop.items"}
    assert collisions.related({"shop.old"}, taken_in) == {"shop.orders", "shop.old", "shop.legacy"}
    assert collisions.related({"shop.items"}, taken_in) == {"shop.items"}


def test_warned_once_while_it_lasts_and_anew_once_forgotten(collisions, caplog):
    on_source = {"shop.orders", "shop.old"}

    def warnings() -> list[str]:
        return [
            r.event_fields["topic"]  # type: ignore[attr-defined]
            for r in caplog.records
            if r.levelno == logging.WARNING and "may not have" in r.getMessage()
        ]

    with caplog.at_level(logging.INFO, logger="offsetsync"):
        for _ in range(2):  # two cycles of two steps
            collisions.cycle_started()
            collisions.held_back({"shop.orders"}, on_source)
            collisions.held_back({"shop.old"}, on_source)
            collisions.cycle_ended()
        assert sorted(warnings()) == ["shop.old", "shop.orders"]
        collisions.cycle_started()  # no group has offsets on either any more
        collisions.cycle_ended()
        collisions.cycle_started()
        collisions.held_back({"shop.old"}, on_source)
        assert sorted(warnings()) == ["shop.old", "shop.old", "shop.orders"]
        collisions.held_back({"shop.old"}, {"shop.old"})
    ended = [r for r in caplog.records if "collides no more" in r.getMessage()]
    assert [r.event_fields["topic"] for r in ended] == ["shop.old"]  # type: ignore[attr-defined]
