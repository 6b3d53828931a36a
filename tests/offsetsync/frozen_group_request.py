"""Run by test_groups.py as a process of its own, since what it guards against is an abort of the
process (librdkafka #4605): offset sync's ClusterGroups asks a group's committed offsets while
the test holds the broker frozen, then again once the broker is thawed. Prints "ready", then one
JSON line per answer: {group: [[topic, partition, offset], ...]}.

    python -m tests.offsetsync.frozen_group_request BOOTSTRAP GROUP
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka.admin import AdminClient

import offsetsync.groups
from offsetsync.groups import ClusterGroups, GroupOffsets

# Long enough for a stranded coordinator request to fire after the thaw, were there one.
_AFTER_THAW_S = 3.0


def _answer(found: dict[str, GroupOffsets]) -> str:
    return json.dumps(
        {
            group: sorted([*key, offset] for key, offset in offsets.offsets.items())
            for group, offsets in found.items()
        }
    )


def main() -> None:
    bootstrap, group = sys.argv[1:3]
    config = {"bootstrap.servers": bootstrap}
    groups = ClusterGroups(lambda: AdminClient(config), config)
    # Connected, with the cluster's metadata, before the freeze; the group's coordinator is
    # looked up only by the first request.
    groups._admin.list_topics(timeout=30)
    print("ready", flush=True)
    sys.stdin.readline()  # the broker is frozen now
    offsetsync.groups._TIMEOUT_S = 1.0  # unanswered: the broker stays frozen longer
    print(_answer(groups.committed([group])), flush=True)
    sys.stdin.readline()  # thawed
    time.sleep(_AFTER_THAW_S)
    offsetsync.groups._TIMEOUT_S = 30.0
    print(_answer(groups.committed([group])), flush=True)


if __name__ == "__main__":
    main()
