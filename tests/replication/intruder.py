"""A consumer that joins a role's group under the role's own static identity and goes: the
role's member is fenced, as the role's own later join fences it after a coordinator moved."""

from __future__ import annotations

import time

from confluent_kafka import Consumer


def fence_static_member(
    bootstrap: str, group: str, instance_id: str, topic: str, **config: object
) -> None:
    """Join ``group`` as the static member ``instance_id`` on ``topic``, wait for an assignment,
    and close: a static member's close does not leave, so the role must join again. It commits
    nothing on close (it stands for the role's own join, which commits only what it copied: a
    record its poll returned, committed, once made stage 2 hold a staging envelope as an
    orphan for good). ``config`` adds to the consumer's (the group's assignment strategy)."""
    intruder = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": instance_id,
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
            **config,
        }
    )
    try:
        intruder.subscribe([topic])
        deadline = time.monotonic() + 60
        while not intruder.assignment():
            assert time.monotonic() < deadline, f"the intruder never joined {group}"
            intruder.poll(0.2)
    finally:
        intruder.close()
