"""Where the demo's and the chaos run's own Kafka clients log: nowhere.

Their librdkafka lines ("Connect ... failed" many times a second while a broker is down) would
cover the progress line on the user's terminal; the roles' own logs say what the clients met.
"""

from __future__ import annotations

import logging

QUIET_CLIENT_LOG = logging.getLogger("exactly.demo.client")
if not QUIET_CLIENT_LOG.handlers:
    QUIET_CLIENT_LOG.addHandler(logging.NullHandler())
QUIET_CLIENT_LOG.propagate = False
