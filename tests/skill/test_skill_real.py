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


def _builder():
    """The lead's ensure_index once it exists; until then a stub that builds nothing."""
    real = I._default_ensure_index()
    if real is not None:
        return real, True
    return (lambda root: Path(root) / "references" / "index"), False


def _agentskills() -> str | None:
    found = shutil.which("agentskills")
    if found:
        return found
    beside = Path(sys.executable).with_name("agentskills")
    return str(beside) if beside.exists() else None


def test_installed_copy_passes_both_validators(tmp_path):
    if not (REPO / "SKILL.md").is_file():
        pytest.skip("SKILL.md is not written yet")
    cli = _agentskills()
    if cli is None:
        pytest.skip("skills-ref (agentskills) is not installed")
    ensure_index, real = _builder()

    # With the stub nothing is built, so build outputs SKILL.md names may be missing: the staged
    # check would refuse them. With the real builder the install checks everything.
    I.install(tmp_path, root=REPO, ensure_index=ensure_index, verify=real, log=lambda _: None)
    dest = tmp_path / "pytorch-fsdp"

    proc = subprocess.run([cli, "validate", str(dest)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Valid skill" in proc.stdout

    problems = V.validate(dest, run_scripts=True)  # our own scripts: trusted, so run them
    if not real:
        problems = [p for p in problems if "(build output:" not in p]
    assert problems == []

    search = dest / "scripts" / "search.py"
    if real and search.is_file():
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
