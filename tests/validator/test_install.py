"""`exactly validate` where the install left Spark out (the roles' install and image)."""

from __future__ import annotations

import subprocess
import sys

from runtime.settings import role_environment

# Python treats a None in sys.modules as a module that is not installed (ModuleNotFoundError).
_WITHOUT_PYSPARK = (
    "import sys; sys.modules['pyspark'] = None; "
    "from exactly.main import main; sys.argv = ['exactly', 'validate']; main()"
)


def test_exactly_validate_without_pyspark_names_the_extra_and_exits_2():
    env = role_environment(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "REPLICATION_TOPICS_INCLUDE": "orders",
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYSPARK],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "exactly validate: needs pyspark, which this install leaves out: "
        "pip install 'kafka-exactly[validator]' (or run the exactly-validator image)"
    )
