"""`exactly demo`: the whole product on two local Kafka clusters, with crashes, and a verdict.

One job per module:

    options.py      what the demo is asked (DemoOptions) and what it found (DemoOutcome)
    scenario.py     the timeline that puts them together
    verdicts.py     how it ends: the roles drained on SIGTERM, the verdict, the Spark audit
    two_way.py      the same for active-active (`--topology active-active`): a flow each way

What the demo shares with `exactly chaos` (clusters, traffic, counters, display, verdicts, the
clean-up) is in exactly/harness/.

The roles run as processes (`python -m replicator`, `python -m deduplicator`,
`python -m offsetsync`), never imported:
the demo shows what an operator would run.
"""
