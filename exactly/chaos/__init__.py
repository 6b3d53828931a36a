"""`exactly chaos`: the product under overlapping faults and load, on its own local clusters,
and the proof that it stayed exactly once.

One job per module:

    plan.py     the faults of a run, drawn from a seed: kind, target, start, hold
    world.py    applies and undoes each fault; restarts a role that exits by itself
    run.py      the timeline: clusters, traffic, roles, the fault window, drain, verdicts
    report.py   chaos-report.json: the fault timeline, counts over time, restarts, verdicts

The traffic, the record-by-record verdict and the consumer-group failover are the demo's
(exactly/demo/), so both commands prove the same thing the same way.
"""
