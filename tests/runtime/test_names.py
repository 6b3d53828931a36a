"""A flow's names are persistent (a renamed staging topic or group starts the flow over), so the
patterns are pinned here, one by one."""

from __future__ import annotations

from runtime.names import FlowNames


def test_topics_of_a_flow():
    names = FlowNames("orders")
    assert names.staging == "__exactly.orders.staging"
    assert names.meta == "__exactly.orders.staging.meta"
    assert names.changelog == "__exactly.orders.changelog"
    assert names.deadletter == "__exactly.orders.deadletter"
    assert names.checkpoints == "__exactly.orders.checkpoints"


def test_an_overridden_staging_topic_carries_its_meta_topic_along():
    names = FlowNames("orders", "staging-eu")
    assert (names.staging, names.meta) == ("staging-eu", "staging-eu.meta")
    assert names.changelog == "__exactly.orders.changelog"


def test_every_topic_of_a_flow_by_what_it_is():
    # What a replicated topic may never be copied to (runtime/topic_naming.py destination_names).
    assert FlowNames("orders", "staging-eu").topics == {
        "staging": "staging-eu",
        "meta": "staging-eu.meta",
        "changelog": "__exactly.orders.changelog",
        "deadletter": "__exactly.orders.deadletter",
        "checkpoints": "__exactly.orders.checkpoints",
    }


def test_client_identities_of_a_flow():
    names = FlowNames("orders")
    assert names.replicator_group == "exactly.orders.replicator"
    assert names.deduplicator_group == "exactly.orders.deduplicator"
    assert names.meta_reader_group == "exactly.orders.meta-reader"
    assert names.changelog_reader_group == "exactly.orders.changelog-reader"
    assert names.deduplicator_transactional_id("pod-0") == "exactly.orders.deduplicator.pod-0"
    assert names.group_instance_id("replicator", "pod-0") == "exactly.orders.replicator.pod-0"
