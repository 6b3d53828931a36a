"""What `exactly demo` and `exactly chaos` share: the local clusters, the sample traffic, the
roles' counters, the live display, and the proof (record by record, the consumer-group
failovers, the Spark audit), so that both commands prove the same thing the same way.

One job per module:

    clusters.py     the two local clusters (fresh each run, in a directory of their own)
    traffic.py      the sample topics and a transactional producer that keeps writing to them
    metrics.py      the roles' Prometheus counters, summed across their restarts
    destination.py  counts the records readable in the destination as they arrive
    progress.py     the live display
    verdict.py      source against destination, record by record
    failover.py     a consumer group stopped on the source resumes on the target (offsetsync)
    audit.py        the second verdict: `exactly validate --require-complete` (Spark) on the flow
    cleanup.py      the clean-up both run whichever way they end
    quiet.py        where their own Kafka clients log: nowhere
    errors.py       the demo's one error (DemoError)

The roles run as processes (`python -m replicator`, ...; runtime/role_process.py), never
imported: the kit shows what an operator would run.
"""
