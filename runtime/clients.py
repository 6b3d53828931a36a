"""Kafka clients' own log lines, and admin clients built with them.

librdkafka writes its log lines to stderr unless a client has a ``logger``: raw ``%6|...`` lines
in a process whose every other line is ``key=value`` or JSON (``EXACTLY_LOG_FORMAT``), which a
log shipper cannot parse. Every client of ours logs through ``LIBRDKAFKA_LOG`` instead.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka.admin import AdminClient

from runtime.settings import ClusterSettings

LIBRDKAFKA_LOG = logging.getLogger("librdkafka")


def admin_client(cluster: ClusterSettings, **config: Any) -> AdminClient:
    """An admin client of ``cluster`` (its properties, then ``config``), logging through us."""
    return AdminClient({**cluster.client_config(), "logger": LIBRDKAFKA_LOG, **config})
