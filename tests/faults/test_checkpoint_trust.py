"""Untrusted checkpoints (group J): DCP unpickles a checkpoint's .metadata, so the example
scripts refuse a checkpoint folder another user could have written before they load it."""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
LOADERS = ["dcp_checkpoint", "elastic_resume"]


class _Payload:
    """Unpickling this creates `marker`: proof that loading ran code from the checkpoint."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def hostile_checkpoint(folder: Path, marker: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(pickle.dumps(_Payload(str(marker))))
    (folder / "__0_0.distcp").write_bytes(b"\0" * 16)
    for p in (folder, folder / ".metadata", folder / "__0_0.distcp"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return folder


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"_under_test_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports torch, as the script does
    return module


@pytest.fixture(scope="module")
def scripts():
    pytest.importorskip("torch")
    return {name: load_script(name) for name in LOADERS}


@pytest.mark.parametrize("name", LOADERS)
def test_refuses_group_or_other_writable_checkpoints(scripts, name, tmp_path):
    check = scripts[name].common.refuse_untrusted_checkpoint
    LaunchError = scripts[name].common.LaunchError
    ck = hostile_checkpoint(tmp_path / "ck", tmp_path / "marker")
    check(str(ck))  # this user's, writable by nobody else: allowed

    (ck / ".metadata").chmod(0o664)
    with pytest.raises(
        LaunchError,
        match=r"\.metadata is writable by its group, and loading a "
        r"checkpoint runs pickled code from it \(if you trust it: chmod -R go-w",
    ):
        check(str(ck))
    (ck / ".metadata").chmod(0o644)
    ck.chmod(0o757)
    with pytest.raises(LaunchError, match=r"ck is writable by other users"):
        check(str(ck))
    ck.chmod(0o755)
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("name", LOADERS)
def test_refuses_checkpoints_owned_by_another_user(scripts, name, tmp_path):
    check = scripts[name].common.refuse_untrusted_checkpoint
    LaunchError = scripts[name].common.LaunchError
    ck = hostile_checkpoint(tmp_path / "ck", tmp_path / "marker")
    if os.geteuid() == 0:
        os.chown(ck / "__0_0.distcp", 65534, -1)
        culprit = ck / "__0_0.distcp"
    else:  # a folder this user does not own: the filesystem root
        ck, culprit = Path("/"), Path("/")
    with pytest.raises(LaunchError, match=rf"{culprit} is owned by uid \d+, not by you"):
        check(str(ck))


def _run(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--device", "cpu", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_dcp_checkpoint_refuses_a_writable_checkpoint(tmp_path):
    marker = tmp_path / "marker"
    ck = hostile_checkpoint(tmp_path / "ck", marker)
    (ck / ".metadata").chmod(0o666)
    proc = _run("dcp_checkpoint.py", ["--load", str(ck), "--steps", "1"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: refusing checkpoint {ck}: "), lines
    assert "writable by other users" in lines[0]
    assert not marker.exists(), "the checkpoint's pickle ran"


@pytest.mark.slow
def test_elastic_resume_refuses_a_planted_checkpoint(tmp_path):
    marker = tmp_path / "marker"
    ckpt_dir = tmp_path / "ckpt"
    step = hostile_checkpoint(ckpt_dir / "step_000003", marker)
    (step / "__0_0.distcp").chmod(0o646)
    proc = _run("elastic_resume.py", ["--ckpt-dir", str(ckpt_dir), "--steps", "4"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: refusing checkpoint {step}: "), lines
    assert not marker.exists(), "the checkpoint's pickle ran"
