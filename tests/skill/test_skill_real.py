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

    # Every script's --help runs in-process in tests/examples (test_example_cli,
    # test_new_scripts_help_and_one_line_errors) and tests/core (search.py); here the copies must be
    # those same files, and one example must start from the installed folder, where its helper
    # module is imported from. Running all of them again as subprocesses cost 15 torch imports.
    assert V.validate(dest) == []
    for script in sorted((REPO / "scripts").glob("*.py")):
        assert (dest / "scripts" / script.name).read_bytes() == script.read_bytes(), script.name

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
    example = subprocess.run(
        [sys.executable, str(dest / "scripts" / "fsdp2_train.py"), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert example.returncode == 0 and "--device" in example.stdout, example.stderr
