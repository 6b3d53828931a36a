"""`exactly chaos`: the product under overlapping faults and load, on its own local clusters,
and the proof that it stayed exactly once.

One job per module:

    plan.py       the faults of a run, drawn from a seed: kind, target, start, hold
    world.py      applies and undoes each fault; restarts a role that exits by itself
    quorum.py     which node of a cluster of several is the active KRaft controller
    network.py    toxiproxy: a proxy per role instance and cluster node, the network faults
    livegroup.py  a consumer group consuming and committing on the source through the run
    options.py    what a run is asked, what it runs (instances, clusters, groups), its outcome
    instances.py  the role instances, each through proxies of its own: environment and start
    window.py     the fault window's faults as they come due: begun, ended, on the timeline
    counts.py     the roles' counters and the live line's snapshot
    failovers.py  after the drain: both consumer groups stopped, synced, resumed on the target
    verdicts.py   every role SIGTERMed, the record-by-record verdict, the Spark audit
    run.py        the timeline: clusters, traffic, roles, the fault window, drain, verdicts
    report.py     chaos-report.json: the fault timeline, counts over time, restarts, verdicts,
                  and what the longest stall began under
    html.py       the same report as one self-contained page

The traffic, the record-by-record verdict, the consumer-group failovers and the second verdict
(`exactly validate --require-complete`, exactly/harness/audit.py) are shared with the demo
(exactly/harness/), so both commands prove the same thing the same way.
"""
