"""Stage 2's limits on waiting for Kafka: each transactional call's timeout and the deadline past
which it counts as hung, how long a retriable error is retried, an abort waited for, a restore
allowed; each with what set it (the librdkafka bugs they work around: docs/design.md §9)."""

from __future__ import annotations

TRANSACTION_TIMEOUT_MS = 60000
TXN_TIMEOUT_S = 30.0
# A transactional call still blocked this long after its own timeout is hung (runtime.deadline).
HARD_DEADLINE_S = TXN_TIMEOUT_S + 30.0
# send_offsets_to_transaction is the call that hangs (librdkafka #5456, #5511, after the target
# broker died): a short timeout, retried within RETRY_DEADLINE_S like any retriable error, lets
# its hard deadline be short too. With 30 s + 30 s, each hang stalled the copy for 60 s in
# `exactly chaos` runs; with 10 s + 5 s, a SIGKILL of the node leading a destination partition
# and the coordinators stalled it 30-37 s on three nodes. It also waits out a coordinator's node
# in controlled shutdown, which answers nothing until it exits (8 s here): in a rolling restart of
# the target the call hung at every node whose coordinators moved. The call answers within
# milliseconds when it works and within its own timeout when it fails; only those outlive both.
# A replacement the deadline calls too early costs one aborted transaction and a new producer's
# init_transactions, and holds one of MAX_HUNG_PRODUCERS until the early call ends.
SEND_OFFSETS_TIMEOUT_S = 3.0
SEND_OFFSETS_HARD_DEADLINE_S = SEND_OFFSETS_TIMEOUT_S + 2.0
# A hung send_offsets_to_transaction leaves its producer to the call and a new one goes on
# (the loop's _replace_hung_producer); past this many stuck at once, the process exits for a
# restart.
MAX_HUNG_PRODUCERS = 2
# With MAX_HUNG_PRODUCERS stuck and a third call hung, how long stage 2 waits for one of their
# calls to end before it exits for a restart. A coordinator the network black-holes (the node
# alive, nothing passing) hangs each call until librdkafka's request fails (socket.timeout.ms,
# 60 s by default), and every replacement meets the same coordinator: the third hang came 17 s
# after the first stuck call began, inside the cut, and the exit took the whole flow down where
# a wait would have ridden out the 20 s cut (tests/nodes/test_cut.py, CI rehearsal 2026-11-29).
# A call that never ends (librdkafka #5511) costs this much more before the restart.
HUNG_CALL_WAIT_S = 60.0
# How long a retriable error of send_offsets_to_transaction is retried before the transaction
# is given up (aborted). init_transactions and commit_transaction wait for as long as it lasts
# (retrying's until_stopped). Half the transaction timeout: with the commit interval (at most
# 20 s, runtime.settings) the transaction ends before the coordinator times it out. Timed out,
# it is aborted by the coordinator with a new producer epoch, which librdkafka reports as
# fenced, and stage 2 exited naming a twin with its identity that did not exist.
RETRY_DEADLINE_S = TRANSACTION_TIMEOUT_MS / 1000 / 2
# A transactional call (or a transaction's flush) that took this long is logged with its time.
SLOW_CALL_S = 1.0
# A call retried for long says so once, then at most this often (with its count).
RETRY_LOG_INTERVAL_S = 30.0
# Restore runs inside the assignment callback, where librdkafka's max.poll.interval.ms (300 s by
# default) keeps counting: past this deadline the process exits and its successor resumes the
# restore from the batch it reached, rather than being evicted from the group mid-restore.
RESTORE_DEADLINE_S = 120.0
# How often a state store held open by another client is tried again, within that deadline.
LOCK_RETRY_S = 0.5
# A transaction's flush is watched this often for a record that failed (the loop's _flushed).
FLUSH_SLICE_S = 0.5
# How long a failing process waits for its open transaction's abort before it exits anyway.
ABORT_ON_FAILURE_S = 5.0
# How long an abort (and the flush before it) may wait before the producer is replaced instead,
# the replacement's init_transactions ending the transaction (runtime.abort_or_replace). The
# abort follows a transaction the target refused, often because a coordinator or leader is
# moving: a node in controlled shutdown answers nothing until it exits. With 30 s each for the
# flush and the abort, one node of a rolling restart of the target stalled the copy 36 s after
# an aborted transaction, nothing logged between the abort and that node's exit. Each of the two
# has this long: up to 10 s before the replacement.
ABORT_TIMEOUT_S = 5.0
