"""Stage 2: staging envelopes into the original records, each exactly once (DESIGN.md §4, 4-6).

Work in progress (issue 5): the dedup rule and the local state store exist; the transactional
loop, recovery from the changelog and the process do not yet, so there is no `python -m
deduplicator` yet.
"""
