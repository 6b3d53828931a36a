"""Stage 2: staging envelopes into the original records, each exactly once (DESIGN.md §4, 4-6).

In progress (issue 5): the transactional loop, the dedup rule, the RocksDB state store with its
changelog, restore on assignment and the dead-letter topic work end to end; metrics, bounded
rebalance deadlines, the long chaos run, the demo and the benchmark do not exist yet.
"""
