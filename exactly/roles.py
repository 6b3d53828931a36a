"""The roles a flow runs, by the module each runs as (``python -m <role>``)."""

from __future__ import annotations

REPLICATOR = "replicator"
DEDUPLICATOR = "deduplicator"
OFFSETSYNC = "offsetsync"
