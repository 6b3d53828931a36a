"""The official apache/kafka image's configuration, as far as docker-compose.yml uses it: each
KAFKA_<NAME> variable is the broker property <name> (lower case, `_` for `.`, `__` for `_`,
`___` for `-`), the storage is formatted with CLUSTER_ID (the image's default id without one),
and the broker runs in the foreground."""

import os
import re
import subprocess
import sys

DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"  # the official image's
PROPERTIES = "/tmp/kafka/server.properties"
LOG_DIR = "/tmp/kraft-combined-logs"
CLASSPATH = "/opt/kafka/libs/*"


def property_name(variable: str) -> str:
    name = variable.removeprefix("KAFKA_").lower()
    return re.sub("_+", lambda m: {1: ".", 2: "_", 3: "-"}[len(m.group())], name)


def main() -> int:
    settings = {"log.dirs": LOG_DIR}
    for variable, value in os.environ.items():
        if variable.startswith("KAFKA_") and variable not in ("KAFKA_HEAP_OPTS", "KAFKA_OPTS"):
            settings[property_name(variable)] = value
    os.makedirs(os.path.dirname(PROPERTIES), exist_ok=True)
    with open(PROPERTIES, "w") as out:
        out.writelines(f"{key}={value}\n" for key, value in sorted(settings.items()))
    java = [
        "java",
        *os.environ.get("KAFKA_HEAP_OPTS", "-Xmx512m").split(),
        "-Dlog4j2.configurationFile=/opt/kafka/log4j2.properties",
        "-cp",
        CLASSPATH,
    ]
    cluster_id = os.environ.get("CLUSTER_ID", DEFAULT_CLUSTER_ID)
    # The "=" form: a cluster id may start with "-", which the parser takes for an option.
    subprocess.run(
        [
            *java,
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            f"--cluster-id={cluster_id}",
            f"--config={PROPERTIES}",
        ],
        check=True,
    )
    os.execvp("java", [*java, "kafka.Kafka", PROPERTIES])
    return 1


if __name__ == "__main__":
    sys.exit(main())
