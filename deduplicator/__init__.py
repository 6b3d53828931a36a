"""Stage 2: staging envelopes into the original records, each exactly once (docs/design.md §4,
invariants 4-6).

The transactional consume-process-produce loop (loop.py), the dedup rule (rule.py), the RocksDB
state store (state.py) with its changelog and restore on assignment (restore.py), the
dead-letter topic and the metrics (metrics.py); app.py runs it as a role.
"""
