"""install faults from the fault campaign (group G)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fault_helpers import watch_renames

from fsdp_skill import build
from fsdp_skill.skill import install as I

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A small valid skill source tree with its own fsdp_skill package."""
    monkeypatch.delenv("FSDP_SKILL_DATA_DIR", raising=False)
    r = tmp_path / "src-tree" / "pytorch-fsdp"
    files = {
        "SKILL.md": "---\nname: pytorch-fsdp\ndescription: Test skill. Use in tests.\n---\n# T\n",
        "scripts/search.py": "print('hi')\n",
        "references/guides/start.md": "# start\n",
        "src/fsdp_skill/__init__.py": "",
    }
    for rel, text in files.items():
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_text(text)
    return r


def run_install(root, target, **kw):
    kw.setdefault("ensure_index", lambda r: Path(r) / "references" / "index")
    kw.setdefault("verify", False)
    return I.install(target, root=root, log=lambda _: None, **kw)


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_target_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as e:
        I.main(["--target", value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fsdp-skill install: error: --target must name a folder, not an empty string"]


def test_permission_error_is_one_line(root, tmp_path, monkeypatch, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    target = locked / "skills"
    if os.geteuid() != 0:
        locked.chmod(0)
    else:  # root passes every permission check: make stat() fail as it does for other users
        real_stat = pathlib.Path.stat

        def stat(self, *a, **kw):
            if locked in Path(self).parents:
                raise PermissionError(13, "Permission denied", str(self))
            return real_stat(self, *a, **kw)

        monkeypatch.setattr(pathlib.Path, "stat", stat)
    monkeypatch.setenv("FSDP_SKILL_ROOT", str(root))
    monkeypatch.setattr(build, "ensure_index", lambda r: Path(r) / "references" / "index")
    try:
        rc = I.main(["--target", str(target)])
    finally:
        locked.chmod(0o755)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err == [f"fsdp-skill install: {target}: Permission denied"], err


def test_installed_folder_is_never_missing(root, tmp_path, monkeypatch):
    target = tmp_path / "skills"
    dest = target / "pytorch-fsdp"
    run_install(root, target)
    (root / "references" / "guides" / "start.md").write_text("# start, v2\n")
    holes = []

    def check(where):
        if (
            not (dest / "SKILL.md").is_file()
            or not (dest / "references" / "guides" / "start.md").is_file()
        ):
            holes.append(where)

    calls = watch_renames(monkeypatch, check)
    run_install(root, target)
    assert calls["n"] > 0 and holes == []
    assert (dest / "references" / "guides" / "start.md").read_text() == "# start, v2\n"
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".lock")) == [
        "pytorch-fsdp"
    ]


def test_leftover_hidden_copies_are_removed(root, tmp_path):
    target = tmp_path / "skills"
    run_install(root, target)
    (target / ".pytorch-fsdp.tmp-dead0001").write_text("a torn file, not a folder")
    (target / ".pytorch-fsdp.old-dead0002" / "deep" / "er").mkdir(parents=True)
    (target / ".pytorch-fsdp.old-dead0002" / "deep" / "er" / "f").write_text("x")
    (target / ".pytorch-fsdp.old-dead0002" / "deep").chmod(0o500)  # a read-only folder inside
    (target / ".other-skill.tmp-1").mkdir()  # not ours: stays
    try:
        run_install(root, target)
    finally:
        if (target / ".pytorch-fsdp.old-dead0002" / "deep").exists():
            (target / ".pytorch-fsdp.old-dead0002" / "deep").chmod(0o700)
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".lock")) == [
        ".other-skill.tmp-1",
        "pytorch-fsdp",
    ]


def test_a_missing_copy_is_put_back_from_the_old_one(root, tmp_path, monkeypatch):
    # Where the OS has no atomic swap, a kill between its two renames leaves only the hidden
    # old copy: the next install restores it first, so the folder is back even if that install fails.
    target = tmp_path / "skills"
    run_install(root, target)
    os.rename(target / "pytorch-fsdp", target / ".pytorch-fsdp.old-dead0003")
    monkeypatch.setattr(I, "_verify", lambda staging, display: ["broken copy"])
    with pytest.raises(I.InstallError, match="fails validation"):
        run_install(root, target, verify=True)
    assert (target / "pytorch-fsdp" / "SKILL.md").is_file()
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".lock")) == [
        "pytorch-fsdp"
    ]


DRIVER = textwrap.dedent("""
    import shutil, sys, time
    from fsdp_skill.skill import install as I
    real_copy = shutil.copy2
    def slow_copy(src, dst, **kw):
        time.sleep(0.02)
        return real_copy(src, dst, **kw)
    shutil.copy2 = slow_copy
    sys.exit(I.main(["--target", {target!r}, "--no-verify", "--no-build"]))
""")


def test_sigterm_mid_copy_leaves_no_hidden_copy(root, tmp_path):
    for i in range(150):
        (root / "references" / "guides" / f"page{i}.md").write_text(f"# page {i}\n")
    target = tmp_path / "skills"
    run_install(root, target)
    before = (target / "pytorch-fsdp" / "SKILL.md").read_bytes()
    env = dict(
        os.environ,
        FSDP_SKILL_ROOT=str(root),  # the skill installed: the small tree, not this checkout
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(target=str(target))],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(target.glob(".pytorch-fsdp.tmp-*/scripts")) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == [
        "fsdp-skill install: terminated; the previous copy is left in place"
    ]
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".lock")) == [
        "pytorch-fsdp"
    ]
    assert (target / "pytorch-fsdp" / "SKILL.md").read_bytes() == before
