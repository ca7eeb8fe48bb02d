"""Shared fixtures: a search index built once per session from the installed torch."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DOCS = REPO.parent / "shared" / "fixtures" / "pytorch-docs"


@pytest.fixture(scope="session")
def built_data(tmp_path_factory):
    """A data dir (api pages + index) for the repo's skill, built once; treat as read-only."""
    data = tmp_path_factory.mktemp("data")
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data))
    subprocess.run(
        [sys.executable, "-m", "fsdp_skill.cli", "build"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return data


@pytest.fixture
def data_copy(built_data, tmp_path):
    """A private copy of the built data dir that a test may damage."""
    dst = tmp_path / "data"
    shutil.copytree(built_data, dst, copy_function=shutil.copy2)
    return dst


def _run_search(args, data_dir, python=None, cwd=None, extra_env=None, script=None):
    env = dict(os.environ, FSDP_SKILL_ROOT=str(REPO), FSDP_SKILL_DATA_DIR=str(data_dir))
    env.update(extra_env or {})
    return subprocess.run(
        [python or sys.executable, str(script or REPO / "scripts" / "search.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=300,
    )


@pytest.fixture
def run_search():
    """run_search(args, data_dir, ...) -> CompletedProcess of scripts/search.py."""
    return _run_search
