"""Run the `exactly` command as a user would type it, from the test's virtual environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def exactly_command() -> list[str]:
    script = Path(sys.executable).parent / "exactly"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "exactly"]


def run_exactly(
    *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*exactly_command(), *args],
        env=dict(env if env is not None else os.environ),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
