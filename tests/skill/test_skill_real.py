"""The real skill, installed into a temp folder, passes skills-ref and our validator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from fsdp_skill.skill import install as I
from fsdp_skill.skill import validate as V


def _agentskills() -> str | None:
    found = shutil.which("agentskills")
    if found:
        return found
    beside = Path(sys.executable).with_name("agentskills")
    return str(beside) if beside.exists() else None


def test_installed_copy_passes_both_validators(tmp_path):
    assert (REPO / "SKILL.md").is_file(), (
        "the checkout has no SKILL.md: there is no skill to install"
    )
    cli = _agentskills()
    if cli is None:
        pytest.skip("skills-ref (agentskills) is not installed")

    # The real install: references and index built for the local torch, the staged copy checked.
    I.install(tmp_path, root=REPO, log=lambda _: None)
    dest = tmp_path / "pytorch-fsdp"

    proc = subprocess.run([cli, "validate", str(dest)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Valid skill" in proc.stdout

    assert V.validate(dest, run_scripts=True) == []  # our own scripts: trusted, so run them

    search = dest / "scripts" / "search.py"
    assert search.is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FSDP_SKILL_ROOT")}
    run = subprocess.run(
        [sys.executable, str(search), "fully_shard"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
