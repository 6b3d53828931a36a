"""Where kafka-exactly keeps what it builds or downloads once (the Kafka jars, toxiproxy, the
validator's merge jar): outside the source tree, shared by every checkout of one user."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_VARIABLE = "LOCALKAFKA_CACHE_DIR"


def cache_root() -> Path:
    """``$LOCALKAFKA_CACHE_DIR``, else ``$XDG_CACHE_HOME/kafka-exactly``, else
    ``~/.cache/kafka-exactly``."""
    configured = os.environ.get(CACHE_DIR_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kafka-exactly"
