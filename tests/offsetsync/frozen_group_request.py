"""Run by test_groups.py as a process of its own, since what it guards against is an abort of the
process (librdkafka #4605): offset sync's offset fetch (the work of its fetching process) asks a
group's committed offsets while
the test holds the broker frozen, then again once the broker is thawed. Prints "ready", then one
JSON line per answer: {group: [[topic, partition, offset], ...]}.

    python -m tests.offsetsync.frozen_group_request BOOTSTRAP GROUP
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka.admin import AdminClient

import offsetsync.admin_session
from offsetsync.offset_fetch import Answer, GroupOffsetFetch

# Long enough for a stranded coordinator request to fire after the thaw, were there one.
_AFTER_THAW_S = 3.0


def _answer(found: dict[str, Answer]) -> str:
    """The groups answered with offsets (an unanswered one is left out)."""
    return json.dumps(
        {
            group: sorted([c.topic, c.partition, c.offset] for c in answer if c.offset >= 0)
            for group, answer in found.items()
            if isinstance(answer, list)
        }
    )


def main() -> None:
    bootstrap, group = sys.argv[1:3]
    config = {"bootstrap.servers": bootstrap}
    groups = GroupOffsetFetch(lambda: AdminClient(config))
    # Connected, with the cluster's metadata, before the freeze; the group's coordinator is
    # looked up only by the first request.
    groups._session.admin.list_topics(timeout=30)
    print("ready", flush=True)
    sys.stdin.readline()  # the broker is frozen now
    offsetsync.admin_session.TIMEOUT_S = 1.0  # unanswered: the broker stays frozen longer
    print(_answer(groups.fetch([group])), flush=True)
    sys.stdin.readline()  # thawed
    time.sleep(_AFTER_THAW_S)
    offsetsync.admin_session.TIMEOUT_S = 30.0
    print(_answer(groups.fetch([group])), flush=True)


if __name__ == "__main__":
    main()
