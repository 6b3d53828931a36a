"""Stage 2: staging envelopes into the original records, each exactly once (docs/design.md §4,
invariants 4-6).

The transactional consume-process-produce loop (loop.py) and what it holds: its clients
(clients.py), the open transaction (transaction.py), the time limits of its Kafka calls
(limits.py), how they are retried (retrying.py), producers left to a hung call (hung.py), the
ACL diagnosis (access.py). The dedup rule (rule.py) and its verdict said (verdict.py), the
records written (output.py), the dead-letter topic (deadletter.py); the owned partitions
(partitions.py), each with its RocksDB state store (state.py) restored from the changelog on
assignment (restore.py); the backlog (backlog.py) and the metrics (metrics.py). app.py runs it as
a role.
"""
