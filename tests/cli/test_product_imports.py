"""The product apart from the kit: what the image runs (`exactly run`, `exactly replicator`,
`exactly deduplicator`, `exactly offsetsync`, and the roles as `python -m <role>`) never loads
localkafka or the demo and chaos kit, so that the kit can change without touching a role."""

from __future__ import annotations

import subprocess
import sys

from runtime.settings import role_environment

# The kit: local clusters, and the demo's and the chaos run's modules and commands.
_KIT = (
    "localkafka",
    "exactly.demo",
    "exactly.chaos",
    "exactly.harness",
    "exactly.kafka_command",
    "exactly.demo_command",
    "exactly.chaos_command",
    "exactly.localenv",
    "exactly.signals",
)

# Each command as the image's entry point runs it; without a configuration each stops at its
# configuration error (exit 2), after it has imported what it runs.
_LOAD_WHAT_THE_IMAGE_RUNS = """
import sys
from exactly.main import main
for command in ("run", "replicator", "deduplicator", "offsetsync"):
    sys.argv = ["exactly", command]
    try:
        main()
    except SystemExit as exit:
        assert exit.code == 2, (command, exit.code)
import deduplicator.app, offsetsync.app, replicator.app, validator.command
print("\\n".join(sorted(sys.modules)))
"""


def _loaded_modules() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_WHAT_THE_IMAGE_RUNS],
        env=role_environment({}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_what_the_image_runs_imports_nothing_of_the_kit():
    modules = _loaded_modules()
    assert "exactly.supervise" in modules  # the check saw `exactly run` itself
    kit = [m for m in modules if any(m == k or m.startswith(f"{k}.") for k in _KIT)]
    assert kit == []
