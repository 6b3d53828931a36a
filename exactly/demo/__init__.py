"""`exactly demo`: the whole product on two local Kafka clusters, with crashes, and a verdict.

One job per module:

    clusters.py     the two demo clusters (fresh each run, in a directory of their own)
    traffic.py      the sample topics and a transactional producer that keeps writing to them
    roles.py        the roles as child processes: start, SIGKILL, restart, SIGTERM
    metrics.py      the roles' Prometheus counters, summed across their restarts
    destination.py  counts the records readable in the destination as they arrive
    progress.py     the live display
    verdict.py      source against destination, record by record
    failover.py     a consumer group stopped on the source resumes on the target (offsetsync)
    audit.py        the second verdict: `exactly validate --require-complete` (Spark) on the flow
    scenario.py     the timeline that puts them together, and the clean-up
    two_way.py      the same for active-active (`--topology active-active`): a flow each way

The roles run as processes (`python -m replicator`, `python -m deduplicator`,
`python -m offsetsync`), never imported:
the demo shows what an operator would run.
"""
