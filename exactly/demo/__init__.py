"""`exactly demo`: the whole product on two local Kafka clusters, with crashes, and a verdict.

One job per module:

    scenario.py     the timeline that puts them together
    two_way.py      the same for active-active (`--topology active-active`): a flow each way

What the demo shares with `exactly chaos` (clusters, traffic, counters, display, verdicts, the
clean-up) is in exactly/harness/.

The roles run as processes (`python -m replicator`, `python -m deduplicator`,
`python -m offsetsync`), never imported:
the demo shows what an operator would run.
"""
