"""fsdp-skill install: what is copied, atomic swaps, agent folders, and the installed copy running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_skill import build
from fsdp_skill.skill import install as I

SHIPPED = {
    "SKILL.md",
    "scripts/search.py",
    "scripts/_common.py",
    "references/README.md",
    "references/guides/start.md",
    "references/api/torch.distributed.fsdp.md",
    "references/index/index.bin",
    "assets/template.yaml",
    "src/fsdp_skill/__init__.py",
    "src/fsdp_skill/marker.py",
}


def listing(folder: Path) -> list[str]:
    # The lock file may or may not outlive the lock, depending on the filelock version.
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


class StubIndex:
    """Stands in for fsdp_skill.build.ensure_index: records calls, builds nothing."""

    def __init__(self):
        self.calls: list[Path] = []

    def __call__(self, root: Path) -> Path:
        self.calls.append(root)
        return root / "references" / "index"


def run_install(root, target, **kw):
    kw.setdefault("ensure_index", StubIndex())
    return I.install(target, root=root, log=lambda _: None, **kw)


def test_plan_ships_the_skill_and_nothing_else(fake_root, tmp_path):
    p = I.plan(fake_root, tmp_path / "out" / "pytorch-fsdp")
    assert {rel for rel, _, _ in p.files} == SHIPPED
    assert p.total_bytes == sum((fake_root / rel).stat().st_size for rel in SHIPPED)


def test_generated_pages_outside_references_are_shipped_inside(fake_root, tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "index").mkdir(parents=True)
    (data / "index" / "index.bin").write_text("NEWER")
    (data / "web").mkdir()
    (data / "web" / "page.md").write_text("# web\n")
    monkeypatch.setenv("FSDP_SKILL_DATA_DIR", str(data))
    files = {rel: src for rel, src, _ in I.plan(fake_root, tmp_path / "x").files}
    assert files["references/index/index.bin"] == data / "index" / "index.bin"
    assert files["references/web/page.md"] == data / "web" / "page.md"


def test_dry_run_writes_nothing(fake_root, tmp_path):
    lines: list[str] = []
    target = tmp_path / "skills"
    stub = StubIndex()
    p = I.install(target, root=fake_root, dry_run=True, ensure_index=stub, log=lines.append)
    assert not target.exists() and stub.calls == []
    assert {ln.split()[0] for ln in lines[:-1]} == {f"pytorch-fsdp/{rel}" for rel in SHIPPED}
    assert (
        lines[-1].startswith(f"would write {len(SHIPPED)} files (")
        and str(target / "pytorch-fsdp") in lines[-1]
    )
    assert len(p.files) == len(SHIPPED)


def test_dry_run_notes_a_missing_index(fake_root, tmp_path):
    shutil.rmtree(fake_root / "references" / "index")
    lines: list[str] = []
    I.install(tmp_path / "skills", root=fake_root, dry_run=True, log=lines.append)
    assert any(ln.startswith("note: the index is not built yet") for ln in lines)


def test_install_then_update_in_place(fake_root, tmp_path):
    target = tmp_path / "skills"
    stub = StubIndex()
    run_install(fake_root, target, ensure_index=stub)
    dest = target / "pytorch-fsdp"
    assert tree(dest) == SHIPPED and stub.calls == [fake_root]
    assert (dest / "scripts" / "search.py").read_bytes() == (
        fake_root / "scripts" / "search.py"
    ).read_bytes()

    # second run: changed, added and removed files all land; nothing temporary is left behind
    (fake_root / "assets" / "template.yaml").write_text("changed\n")
    (fake_root / "assets" / "new.txt").write_text("new\n")
    (fake_root / "references" / "api" / "torch.distributed.fsdp.md").unlink()
    (dest / "user-scratch.txt").write_text("old copy only")
    run_install(fake_root, target)
    assert (dest / "assets" / "template.yaml").read_text() == "changed\n"
    assert tree(dest) == (SHIPPED | {"assets/new.txt"}) - {
        "references/api/torch.distributed.fsdp.md"
    }
    assert listing(target) == ["pytorch-fsdp"]


def test_installed_copy_runs_from_any_cwd(fake_root, tmp_path):
    target = tmp_path / "skills"
    run_install(fake_root, target)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FSDP_SKILL_ROOT")}
    proc = subprocess.run(
        [sys.executable, str(target / "pytorch-fsdp" / "scripts" / "search.py"), "query"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        Path(proc.stdout.strip())
        == (target / "pytorch-fsdp" / "src" / "fsdp_skill" / "marker.py").resolve()
    )


def test_failed_validation_keeps_the_old_copy(fake_root, tmp_path, capsys):
    target = tmp_path / "skills"
    run_install(fake_root, target)
    before = (target / "pytorch-fsdp" / "SKILL.md").read_text()
    (fake_root / "SKILL.md").write_text(before.replace("name: pytorch-fsdp", "name: Pytorch-FSDP"))
    with pytest.raises(I.InstallError, match="fails validation"):
        run_install(fake_root, target)
    assert (target / "pytorch-fsdp" / "SKILL.md").read_text() == before
    err = capsys.readouterr().err
    assert f"{target / 'pytorch-fsdp'}/SKILL.md:2: name 'Pytorch-FSDP' must be lowercase" in err
    assert listing(target) == ["pytorch-fsdp"]
    run_install(fake_root, target, verify=False)  # --no-verify skips the check


def test_failed_copy_keeps_the_old_copy(fake_root, tmp_path, monkeypatch):
    target = tmp_path / "skills"
    run_install(fake_root, target)
    (fake_root / "assets" / "template.yaml").write_text("changed\n")
    real_copy = shutil.copy2
    calls = {"n": 0}

    def flaky(src, dst, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device", str(dst))
        return real_copy(src, dst, **kw)

    monkeypatch.setattr(I.shutil, "copy2", flaky)
    with pytest.raises(I.InstallError, match="No space left on device"):
        run_install(fake_root, target)
    assert (target / "pytorch-fsdp" / "assets" / "template.yaml").read_text() == "a: b\n"
    assert listing(target) == ["pytorch-fsdp"]


def test_leftovers_of_a_killed_install_are_removed(fake_root, tmp_path):
    target = tmp_path / "skills"
    for stale in (".pytorch-fsdp.tmp-dead", ".pytorch-fsdp.old-dead"):
        (target / stale / "x").mkdir(parents=True)
    (target / "other-skill").mkdir()
    run_install(fake_root, target)
    assert listing(target) == ["other-skill", "pytorch-fsdp"]


def test_index_builder(fake_root, tmp_path, monkeypatch, capsys):
    def broken(root):
        raise RuntimeError("torch docstrings unreadable")

    with pytest.raises(
        I.InstallError, match="building the index failed: RuntimeError: torch docstrings"
    ):
        run_install(fake_root, tmp_path / "a", ensure_index=broken)
    with pytest.raises(I.InstallError, match="outside"):
        run_install(
            fake_root, tmp_path / "b", ensure_index=lambda root: tmp_path / "elsewhere" / "index"
        )
    # by default the builder is fsdp_skill.build.ensure_index, called with the skill's root
    default = StubIndex()
    monkeypatch.setattr(build, "ensure_index", default)
    I.install(tmp_path / "c", root=fake_root, log=lambda _: None)
    assert default.calls == [fake_root]
    assert (tmp_path / "c" / "pytorch-fsdp" / "SKILL.md").is_file()
    assert capsys.readouterr().err == ""
    # --no-build never calls it
    stub = StubIndex()
    run_install(fake_root, tmp_path / "d", ensure_index=stub, build=False)
    assert stub.calls == []


def test_refuses_to_install_over_its_source(fake_root, tmp_path):
    with pytest.raises(I.InstallError, match="the skill being installed"):
        run_install(fake_root, fake_root.parent)
    with pytest.raises(I.InstallError, match="which the install copies"):
        run_install(fake_root, fake_root / "references" / "skills")
    blocker = tmp_path / "blocked"
    blocker.mkdir()
    (blocker / "pytorch-fsdp").write_text("a file")
    with pytest.raises(I.InstallError, match="not a plain folder"):
        run_install(fake_root, blocker)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "pytorch-fsdp").symlink_to(fake_root)
    with pytest.raises(I.InstallError, match="not a plain folder"):
        run_install(fake_root, tmp_path / "linked")


@pytest.mark.parametrize(
    "agent,env,default",
    # codex now reads the shared ~/.agents/skills: tests/skill/test_install_agents.py covers it.
    [("claude", "CLAUDE_CONFIG_DIR", ".claude"), ("hermes", "HERMES_HOME", ".hermes")],
)
def test_agent_folders(agent, env, default, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(env, raising=False)
    assert I.agent_skills_dir(agent) == tmp_path / "home" / default / "skills"
    monkeypatch.setenv(env, str(tmp_path / "moved"))
    assert I.agent_skills_dir(agent) == tmp_path / "moved" / "skills"


def test_main(fake_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FSDP_SKILL_ROOT", str(fake_root))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setattr(build, "ensure_index", StubIndex())

    assert I.main(["--agent", "claude"]) == 0
    assert (tmp_path / "home" / ".claude" / "skills" / "pytorch-fsdp" / "SKILL.md").is_file()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("installed pytorch-fsdp into ")

    assert I.main(["--target", str(tmp_path / "t")]) == 0
    assert (tmp_path / "t" / "pytorch-fsdp").is_dir() and not (
        tmp_path / "home" / ".codex"
    ).exists()

    assert I.main(["--target", str(tmp_path / "dry"), "--dry-run"]) == 0
    assert not (tmp_path / "dry").exists()
    capsys.readouterr()

    (tmp_path / "afile").write_text("x")
    assert I.main(["--target", str(tmp_path / "afile")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fsdp-skill install: {tmp_path / 'afile'}: not a folder"]


@pytest.mark.parametrize(
    "argv", [[], ["--agent", "vim"], ["--bogus"], ["--agent", "codex", "--target", "x"]]
)
def test_main_bad_arguments_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as e:
        I.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fsdp-skill install: error: "), err
