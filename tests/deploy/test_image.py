"""The roles' image (Dockerfile, stage `exactly`) without a Docker engine: its `build` stage's
own COPY and RUN steps, run here into a temporary directory, give an install that runs every role
command, leaves Spark and Java out, and is small."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.dockerfile import as_argv, stage_instructions
from tests.replication.processes import REPOSITORY_ROOT

pytestmark = pytest.mark.timeout(900)


def _directory_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def test_the_roles_image_install_runs_every_role_command_without_spark(tmp_path):
    source, venv = tmp_path / "src", tmp_path / "opt-exactly"
    source.mkdir()
    for instruction, arguments in stage_instructions("build"):
        if instruction == "COPY":
            *sources, _destination = arguments.split()
            for name in sources:
                origin = REPOSITORY_ROOT / name
                if origin.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__")
                    shutil.copytree(origin, source / name, ignore=ignore)
                else:
                    shutil.copy2(origin, source / name)
        elif instruction == "RUN":
            argv = as_argv(arguments, {"/opt/exactly": str(venv), "/src": str(source)})
            subprocess.run(argv, check=True, timeout=600, cwd=tmp_path)
    exactly = venv / "bin" / "exactly"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    listed = subprocess.run(
        [exactly, "--help"], env=env, capture_output=True, text=True, check=True
    ).stdout
    for command in ("run", "replicator", "deduplicator", "offsetsync", "validate", "config"):
        assert f"  {command} " in listed, listed
    for module in ("replicator", "deduplicator", "offsetsync", "exactly.supervise"):
        subprocess.run([venv / "bin" / "python", "-c", f"import {module}"], env=env, check=True)
    no_spark = subprocess.run(
        [venv / "bin" / "python", "-c", "import pyspark"], env=env, capture_output=True
    )
    assert no_spark.returncode != 0
    size_mb = _directory_size(venv) / 1e6
    print(f"roles' install: {size_mb:.0f} MB in {venv}")
    # Spark alone is about 400 MB: an install near that size has brought it in.
    assert size_mb < 150, size_mb
    assert not any(venv.rglob("*.jar"))
    assert os.access(exactly, os.X_OK)
